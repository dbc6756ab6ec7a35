"""Benchmark: the optimal-race solver (``rulka sim optimal``) on the bundled tracks and ten
generated ones, at the learner's default decision period (50 ms, configs/sim_iqn.yaml), on one core.

For each track: the scripted driver's time, the best seed race, the solver's time at --width and
at twice it (so a reader sees whether more search still helped), nodes expanded and seconds.
Prints one JSON object. With --write it also stores that object in bench/history/optimal_times.json (one
run per decision period) and the per-track times in rulka/envs/sim/optimal_times.json (the file ``rulka eval`` reads for its
``solver`` column); with --tapes DIR it writes each track's action tape there.

    python -m bench.optimal [--width 8] [--tracks default,gen:671432803] [--write] [--tapes DIR]
    python -m bench.optimal --steps-per-action 10 --write --tapes DIR      # 100 ms decisions first,
    python -m bench.optimal --write --tapes DIR --seed-tapes DIR           # then 50 ms seeded with them
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench.sim import pin_one_core  # noqa: E402
from rulka.envs.sim.optimal import SOLVER_TIMES_FILE, SOLVER_TIMES_FORMAT, Tape, solve  # noqa: E402
from rulka.envs.sim.tracks import bundled_track_names  # noqa: E402
from rulka.envs.video import file_stem  # noqa: E402

# the generated tracks of the map-cycle studies (configs/sim_iqn_cycle.yaml, bench/run_studies.json)
GEN_SEEDS = (671432803, 1953026504, 1275237860, 686880200, 1738703944, 1986020193, 2001172939, 212475639,
             623225193, 896663489)
BENCH_FILE = Path(__file__).with_name("history") / "optimal_times.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="the default track only, width 4 (python -m bench --quick)")
    parser.add_argument("--steps-per-action", type=int, default=5)
    parser.add_argument("--tracks", default=None, help="comma-separated (default: bundled + the ten generated)")
    parser.add_argument("--write", action="store_true", help="store the results (see the module docstring)")
    parser.add_argument("--tapes", type=Path, default=None, metavar="DIR", help="write each track's tape here")
    parser.add_argument("--seed-tapes", type=Path, default=None, metavar="DIR",
                        help="seed each track's search with its tapes in DIR at a multiple of the decision "
                             "period (a run at 100 ms seeding one at 50 ms)")
    args = parser.parse_args()
    pinned = pin_one_core()
    if args.quick:
        args.tracks, args.width = args.tracks or "default", 4
    tracks = args.tracks.split(",") if args.tracks else [*bundled_track_names(), *(f"gen:{s}" for s in GEN_SEEDS)]
    rows = []
    t0 = time.perf_counter()
    c0 = time.process_time()
    for name in tracks:
        coarser = coarser_tapes(args.seed_tapes, name, 10 * args.steps_per_action)
        sol = solve(name, steps_per_action=args.steps_per_action, width=args.width,
                    log=lambda line: print(line, file=sys.stderr, flush=True), seed_from=coarser)
        tape, s = sol.tape, sol.tape.search
        by = s["best_ms_by_width"]
        rows.append({
            "track": name, "race_time_ms": tape.race_time_ms, "scripted_ms": sol.scripted_time_ms,
            "over_scripted": round(tape.race_time_ms / sol.scripted_time_ms, 4)
            if tape.race_time_ms and sol.scripted_time_ms else None,
            "seed": sol.seed_source, "seed_ms": sol.seed_time_ms,
            "coarser_seed_tapes": {f"{t.ms_per_action} ms": t.race_time_ms for t in coarser},
            f"width_{args.width}_ms": by[str(args.width)], f"width_{2 * args.width}_ms": by[str(2 * args.width)],
            "improved_by_doubling_ms": s["improved_by_doubling_ms"], "nodes_expanded": s["nodes_expanded"],
            "seconds": s["seconds"], "actions": len(tape.actions),
        })
        if args.tapes is not None:
            tape.write(args.tapes / f"optimal_{file_stem(name)}_{tape.ms_per_action}ms.json")
    result = {
        "benchmark": "optimal_race_solver",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python -m bench.optimal", *sys.argv[1:]]),
        "host": platform.node(), "cpu": pinned, "load_average_1min": round(os.getloadavg()[0], 2),
        "ms_per_action": 10 * args.steps_per_action, "width": args.width, "doubled_width": 2 * args.width,
        "seconds_total": round(time.perf_counter() - t0, 1), "cpu_seconds_total": round(time.process_time() - c0, 1),
        "tracks": rows,
        "improved_by_doubling": sum(1 for r in rows if r["improved_by_doubling_ms"]),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.write:
        write_results(result)
    return 0


def coarser_tapes(folder: Path | None, track: str, ms_per_action: int) -> list[Tape]:
    """The tapes of ``track`` in ``folder`` (as --tapes names them) at multiples of ``ms_per_action``."""
    if folder is None:
        return []
    out = []
    for path in sorted(folder.glob(f"optimal_{file_stem(track)}_*ms.json")):
        tape = Tape.read(path)
        if tape.track == track and tape.ms_per_action > ms_per_action and tape.ms_per_action % ms_per_action == 0:
            out.append(tape)
    return out


def write_results(result: dict) -> None:
    """Merge ``result`` into bench/history/optimal_times.json (one run per decision period) and its times
    into the table ``rulka eval`` reads (rulka/envs/sim/optimal_times.json)."""
    period = str(result["ms_per_action"])
    runs: dict[str, dict] = {}
    if BENCH_FILE.is_file():
        runs = json.loads(BENCH_FILE.read_text(encoding="utf-8")).get("runs", {})
    runs[period] = result
    BENCH_FILE.write_text(json.dumps({"benchmark": "optimal_race_solver", "runs": runs}, indent=2) + "\n",
                          encoding="utf-8")
    table: dict[str, dict[str, int]] = {}
    if SOLVER_TIMES_FILE.is_file():
        table = json.loads(SOLVER_TIMES_FILE.read_text(encoding="utf-8")).get("times", {})
    table.setdefault(period, {}).update(
        {r["track"]: r["race_time_ms"] for r in result["tracks"] if r["race_time_ms"] is not None})
    SOLVER_TIMES_FILE.write_text(json.dumps({
        "format": SOLVER_TIMES_FORMAT,
        "about": "fastest races `rulka sim optimal` found (ms), per decision period (ms) and track; "
                 "written by bench/optimal.py --write (details in bench/history/optimal_times.json)",
        "times": table}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
