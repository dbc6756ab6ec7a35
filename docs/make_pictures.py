"""Regenerate the README's pictures of the default run, and the caption that says where they come from.

    python docs/make_pictures.py                 # the README's default run (20 minutes), then the pictures
    python docs/make_pictures.py --minutes 12    # a shorter run (the caption says how long)
    python docs/make_pictures.py --reuse         # redraw from the existing run folder

It runs ``rulka run configs/sim_iqn.yaml --workers 2 --minutes M`` into ``runs/readme_pictures``,
then ``rulka plot`` (the learning curve of the default track) and ``rulka eval --video`` (the line
the greedy policy drives, coloured by speed), copies both PNGs to ``docs/pictures/`` and rewrites
the block between the ``pictures:begin`` / ``pictures:end`` markers in README.md with the date,
the machine, the run's length and what the greedy policy did.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PICTURES = ROOT / "docs" / "pictures"
BEGIN, END = "<!-- pictures:begin -->", "<!-- pictures:end -->"
CONFIG = "configs/sim_iqn.yaml"


def _rulka(*args: str) -> list[str]:
    return [sys.executable, "-m", "rulka.cli", *args]


def _last_metric(run_dir: Path, name: str) -> float | None:
    value = None
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if name in record.get("metrics", {}):
                value = record["metrics"][name]
    return value


def _machine() -> str:
    load = f", load average {os.getloadavg()[0]:.1f} at the start" if hasattr(os, "getloadavg") else ""
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}{load}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="length of the run (default 20, the README's)")
    parser.add_argument("--frames", type=int, default=None,
                        help="stop at this many env frames instead (--minutes stays the cap)")
    parser.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "readme_pictures")
    parser.add_argument("--reuse", action="store_true", help="draw from the run folder as it is")
    parser.add_argument("--episodes", type=int, default=3, help="greedy episodes for the eval (default 3)")
    parser.add_argument("--describe", default=None, metavar="TEXT",
                        help="with --reuse: what the run was, for the caption (default: 'an existing run folder')")
    args = parser.parse_args()
    run_dir = args.run_dir.resolve()
    machine = _machine()
    started = datetime.datetime.now(datetime.UTC)
    if not args.reuse:
        if run_dir.exists():
            sys.exit(f"{run_dir} exists: remove it, or pass --reuse to draw from it")
        budget = ["--minutes", str(args.minutes)] + (["--frames", str(args.frames)] if args.frames else [])
        subprocess.run(_rulka("run", CONFIG, "--workers", "2", *budget, "--run-dir", str(run_dir)), cwd=ROOT, check=True)
    work = run_dir / "readme"
    shutil.rmtree(work, ignore_errors=True)
    plots = subprocess.run(_rulka("plot", str(run_dir), "--out", str(work / "plots")), cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    curve = next((Path(p) for p in plots if Path(p).name == "default.png"), None) or Path(plots[0])
    report = json.loads(subprocess.run(
        _rulka("eval", str(run_dir), "--episodes", str(args.episodes), "--json", "--video", str(work / "video")),
        cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    line = next(Path(p) for p in report["video"] if p.endswith(".png"))
    PICTURES.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(curve, PICTURES / "learning_curve.png")
    shutil.copyfile(line, PICTURES / "learned_line.png")

    overall = report["overall"]
    samples = _last_metric(run_dir, "charts/samples_received")
    if overall.get("finished"):
        did = (f"finished {overall['finished']} of {overall['episodes']} greedy tries in "
               f"{overall['race_time_ms_mean'] / 1000:.2f} ± {overall['race_time_ms_std'] / 1000:.2f} s "
               f"(reference {overall.get('reference_time_ms', 0) / 1000:.2f} s)")
    else:
        did = f"did not finish in {overall['episodes']} greedy tries (return {overall['return_mean']:.1f})"
    flags = ("" if args.minutes == 20 else f" --minutes {args.minutes:g}") + (f" --frames {args.frames}" if args.frames else "")
    run_text = ((args.describe or "an existing run folder") if args.reuse
                else f"`rulka run {CONFIG} --workers 2{flags or ' --minutes 20'}`")
    again = flags + (" --reuse" if args.reuse else "")
    caption = (f"Made by `python docs/make_pictures.py{again}` "
               f"on {started:%Y-%m-%d} ({machine}): {run_text}, "
               f"{int(samples or 0):,} frames received. Its best policy (`best/`, what `rulka eval RUN` drives) "
               f"{did}. Left: the first greedy "
               f"episode's line, coloured by speed. Right: return and race time per episode of the "
               f"exploring workers against frames and wall time (rulka plot).")
    block = (f"{BEGIN}\n<img src=\"docs/pictures/learned_line.png\" width=\"45%\"> "
             f"<img src=\"docs/pictures/learning_curve.png\" width=\"54%\">\n\n{caption}\n{END}")
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
        readme.write_text(text, encoding="utf-8")
    print(caption)
    return 0


if __name__ == "__main__":
    sys.exit(main())
