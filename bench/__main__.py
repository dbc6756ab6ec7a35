"""``python -m bench``: run every benchmark script and rewrite BENCHMARKS.md.

Each script (``python -m bench.<name>``) runs in its own subprocess (so one crash or hang cannot take the others down), must
print one JSON object on stdout (the last line that parses as one is taken), and gets
``--quick`` when the suite runs with ``--quick``. A missing, failing, hanging or silent script
is reported as such in BENCHMARKS.md. Results of scripts not run this time (``--only``) are kept
from the previous BENCHMARKS.md, with their own date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.history_tables import (  # noqa: F401  (re-exported: their home before the split)
    HISTORY_DIR,
    cuda_runs,
    extended_runs,
    learner_fix_studies,
    recipe_studies,
    render_history,
    run_studies,
)
from bench.readme import update_readme
from bench.rows import flatten, format_number  # noqa: F401  (flatten: re-exported)
from bench.targets import dig as _dig
from bench.targets import target_rows, targets_table

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
# the studies' records (seed studies, learning runs, GPU runs) and their tables: kept out of
# BENCHMARKS.md, which holds the targets and each script's latest figures (not in sdist or wheel)
HISTORY_MD = HISTORY_DIR / "README.md"
RESULTS_JSON = HISTORY_DIR / "results.json"  # the figures behind the repository's BENCHMARKS.md

# name -> what it measures (in run order)
SCRIPTS: dict[str, str] = {
    "transport": "relay throughput over real TLS on loopback, weights fan-out, raw-TLS ceiling, tlspyo-pickle baseline",
    "sim": "simulator actions per second on one core, with and without the image",
    "pipeline": "observation/reward pipeline cost per action on one core",
    "learner": "IQN training batches/s and samples/s at batch 512",
    "learner_topologies": "the guide's network catalogue (fusion modes, ViT stems): IQN batches/s at batch 512, "
                          "the plain CNN as the baseline of the same run",
    "actor": "IQN actor decisions/s at batch 1 on one core, numpy path vs torch per worker network; the image "
             "networks' actor paths (eager, batch1, int8, compile, ONNX Runtime; CUDA graph where a GPU is)",
    "trainer_loop": "trainer role with N unpaced workers: updates/s over IQNAgent.train alone, samples per insert",
    "allocator": "IQN learner updates/s and page faults per update: glibc's malloc defaults vs what rulka-trainer sets",
    "colocation": "bare learner beside a paced run on the other cores vs the same run paused: what sharing the machine costs",
    "ingest": "transitions/s one trainer ingests at 160x120 + 184 floats, 1, 2 and all decode threads",
    "checkpoint": "trainer checkpoint of a 50k-transition 160x120 replay: seconds and MB written, first and "
                  "second (5% new), incremental chunks vs the whole replay.npz rewrite",
    "e2e": "time for the default `rulka run` to first finish the track",
    "peer_tmrl": "TMRL 0.7.1 side by side: relay path on the same payloads, bytes on the wire per transition",
    "sac_pendulum": "SAC on Pendulum-v1: `rulka run` vs TMRL 0.7.1's pipeline, wall-clock and env steps to -200",
    "tm2020_fake": "TM2020 worker loop on the fake game at 20 Hz: jitter p50/p99, capture+pipeline ms per step",
    "tmnf_fake": "TMNF worker on the fake game over the plugin protocol: actions/s per worker, ms per step over the sim, "
                 "ms per 160x120 frame, the worker's own ms per action, actions/s per instance at 1, 2, 4 instances",
    "policy_cartpole": "PPO / GRPO / DPO on CartPole-v1: env steps and seconds to a greedy 475 (CleanRL ppo.py beside)",
    "soak": "real processes for minutes through a trainer stall, worker/relay/trainer kills: segments lost or "
            "duplicated, fair share, time until segments flow again, relay peak RSS",
    "optimal": "the optimal-race solver (rulka sim optimal) on the 5 bundled and 10 generated tracks: race time, "
               "ratio to the scripted driver, whether doubling the beam still improved it",
    "fleet": "simulated workers (own TLS connection and key each) against a real relay and trainer link through a "
             "throttled uplink: relay CPU/MB and peak RSS, time until a version reaches 50/99/100%, policy lag, "
             "segments lost/duplicated, disconnects, fairness (default: the quick scenario)",
}
DEFAULT_TIMEOUT_S = 900.0
# scripts whose full run can pass the default limit on the 2-core machine (2026-11-24: trainer_loop
# took 612 s for its pinned rows alone, so about twice that with the unpinned ones, and over 900 s
# once; policy_cartpole 839 s, soak 609 s, e2e 606 s)
SCRIPT_TIMEOUT_S: dict[str, float] = {"trainer_loop": 2700.0, "policy_cartpole": 1800.0, "soak": 1500.0, "e2e": 1500.0}


def machine_info() -> dict[str, Any]:
    """CPU model, cores, RAM, OS, Python and torch versions of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb: float | None = None
    try:
        ram_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_gb": None if ram_gb is None else round(ram_gb, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch_version,
    }
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        if gpu.returncode == 0 and gpu.stdout.strip():
            info["gpu"] = gpu.stdout.strip().replace("\n", ", ")
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def parse_json_output(stdout: str) -> dict[str, Any] | None:
    """The script's figures: the whole output as one JSON object, else the lines that are JSON
    objects (one: that object; several, e.g. one per device: keyed by their ``device`` field or
    position)."""
    try:
        whole = json.loads(stdout)
        if isinstance(whole, dict):
            return whole
    except ValueError:
        pass
    found: list[dict[str, Any]] = []
    for line in stdout.strip().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            found.append(obj)
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    keys = [str(obj.get("device", i)) for i, obj in enumerate(found)]
    if len(set(keys)) != len(keys):
        keys = [str(i) for i in range(len(found))]
    return dict(zip(keys, found))


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " / ".join(kept)[:400]


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_script(name: str, bench_dir: Path, quick: bool, timeout_s: float,
               extra: Sequence[str] = ()) -> dict[str, Any]:
    """Run ``bench_dir/<name>.py`` (with ``extra`` arguments); returns a result dict with ``status``
    ok|missing|failed|timeout|bad output."""
    script = bench_dir / f"{name}.py"
    ours = bench_dir == BENCH_DIR  # run as a module of the bench package; a foreign folder's as a file
    shown = f"python -m bench.{name}" if ours else f"python {script}"
    run = [sys.executable, "-m", f"bench.{name}"] if ours else [sys.executable, str(script)]
    result: dict[str, Any] = {"name": name, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    if not script.is_file():
        return {**result, "status": "missing", "command": shown, "detail": f"{script.name} does not exist yet"}
    args = ["--quick"] if quick else []
    extra = list(extra)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    for attempt in (args, []) if args else (args,):
        result["command"] = " ".join([shown, *attempt, *extra])
        # own process group: a script's helpers (servers, workers) go with it on a timeout
        proc = subprocess.Popen([*run, *attempt, *extra], cwd=REPO_ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return {**result, "status": "timeout", "seconds": round(time.monotonic() - started, 1),
                    "detail": f"no result within {timeout_s:g} s"}
        except BaseException:
            _kill_group(proc)
            raise
        _kill_group(proc)  # stragglers a script left behind
        if attempt and proc.returncode == 2 and "unrecognized arguments: --quick" in stderr:
            continue  # the script has no quick mode: run it in full
        break
    result["seconds"] = round(time.monotonic() - started, 1)
    if proc.returncode != 0:
        return {**result, "status": "failed",
                "detail": f"exit code {proc.returncode}: {_tail(stderr) or _tail(stdout)}"}
    figures = parse_json_output(stdout)
    if figures is None:
        return {**result, "status": "bad output", "detail": f"no JSON object on stdout: {_tail(stdout)!r}"}
    return {**result, "status": "ok", "figures": figures}


def peer_comparison(results: dict[str, dict[str, Any]]) -> list[str]:
    """rulka and TMRL side by side, from the peer_tmrl and transport figures (when present)."""
    peer = _last_ok(results.get("peer_tmrl"))
    if peer is None:
        return []
    figures = peer["figures"]
    transport_res = _last_ok(results.get("transport")) or {}
    transport = transport_res.get("figures", {})
    rows = [("bytes on the wire per transition (64x64 grayscale, 4-frame history)",
             _dig(figures, "rulka.zstd.bytes_per_transition"), _dig(figures, "tmrl.bytes.bytes_per_transition"),
             None)]
    for size in ("64KB", "1MB", "26MB"):
        rows.append((f"relay payload MB/s, {size} messages",
                     _dig(transport, f"relay_mb_s.{size}"), _dig(figures, f"tmrl.relay_tls.{size}.mb_per_s"),
                     _dig(figures, f"tmrl.relay_tcp.{size}.mb_per_s")))
    race = _last_ok(results.get("sac_pendulum")) or {}
    race_figures = race.get("figures", {})
    for key, label in (("seconds_to_target", "SAC Pendulum-v1: seconds to a mean return of -200"),
                       ("env_steps_to_target", "SAC Pendulum-v1: env steps to a mean return of -200")):
        ours, theirs = _dig(race_figures, f"rulka.{key}"), _dig(race_figures, f"tmrl.{key}")
        if race_figures:
            rows.append((f"{label} (`sac_pendulum`, {race.get('date', '')})",
                         ours if ours is not None else "not reached", theirs if theirs is not None else "not reached",
                         None))
    when_transport = transport_res.get("date", "not run")
    lines = ["", "## Peer comparison: rulka vs TMRL 0.7.1", "",
             f"Same machine. rulka's relay figures come from `transport` ({when_transport}), TMRL's "
             f"figures and both bytes per transition from `peer_tmrl` ({peer.get('date', '')}); details "
             "in their sections. Figures taken at different times on a shared machine compare loosely.", "",
             "Relay figures are over TLS for both; the last column is TMRL with TLS off (its default).", "",
             "| figure | rulka | TMRL | TMRL, plain TCP |", "|---|---|---|---|"]
    for label, ours, theirs, theirs_tcp in rows:
        if ours is None and theirs is None and theirs_tcp is None:
            continue
        lines.append(f"| {label} | {format_number(ours)} | {format_number(theirs)} | {format_number(theirs_tcp)} |")
    tmrl = figures.get("tmrl", {})
    if isinstance(tmrl, dict) and tmrl.get("installed") is False:
        lines += ["", f"TMRL could not be installed here: {format_number(tmrl.get('error', ''))}"]
    return lines


def _with_repeats(value: Any, repeats: Any) -> str:
    """``0.91 (0.88, 0.91, 0.95)``: the median repeat's figure, then every repeat's."""
    if not isinstance(repeats, list) or len(repeats) < 2:
        return format_number(value)
    return f"{format_number(value)} ({', '.join(format_number(x) for x in repeats)})"


def trainer_loop_table(results: dict[str, dict[str, Any]]) -> list[str]:
    """One row per trainer_loop run: the ratio to the bare learner and the samples per insert."""
    res = _last_ok(results.get("trainer_loop")) or {}
    rows = res.get("figures", {}).get("results")
    if not isinstance(rows, list) or not rows:
        return []
    lines = ["", "## Trainer loop at a glance", "",
             f"From `trainer_loop` ({res.get('date', '')}): updates/s of the whole trainer role with N unpaced "
             "workers over `agent.train` alone (target >= 0.9), samples per insert over its target (target "
             "within +-10%), the share of time the learner spent training and the share it waited for data "
             "(starved: the workers were slower than the learner), and the ratio over the time it had data. "
             "The last two columns: the bare learner again beside one process per worker running the workers' "
             "policy inference on their cores (what busy neighbour cores cost `agent.train` on this machine), "
             "and the trainer over that loaded baseline. Measured with `--paired K` (the default): K windows "
             "of the running trainer, each between two windows of the bare learner taken seconds apart with "
             "the run paused; the median of the K ratios, every ratio in brackets (with `--repeat N`: the "
             "repeat with the median ratio, every repeat's in brackets).", "",
             "| config | workers | worker priority | workers pinned | ratio | ratio when fed | samples per insert / target "
             "| learner busy | learner starved | trainer updates/s | alone updates/s | alone, cores loaded | ratio vs loaded |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if not isinstance(row, dict):
            continue
        lines.append(" | ".join(["", str(row.get("config", "")), format_number(row.get("workers")),
                                 str(row.get("worker_priority", "normal")),
                                 {True: "yes", False: "no"}.get(row.get("pinned"), "no"),
                                 _with_repeats(row.get("ratio"), row.get("ratio_repeats") or row.get("ratio_pairs")),
                                 format_number(row.get("ratio_when_fed")),
                                 format_number(row.get("spi_vs_target")),
                                 format_number(_dig(row, "trainer.learner_busy")),
                                 format_number(_dig(row, "trainer.learner_starved")),
                                 format_number(_dig(row, "trainer.updates_per_s_paired")
                                               or _dig(row, "trainer.updates_per_s")),
                                 format_number(_dig(row, "alone.updates_per_s")),
                                 format_number(_dig(row, "alone_loaded.updates_per_s")),
                                 _with_repeats(row.get("ratio_vs_loaded"), row.get("ratio_vs_loaded_repeats")
                                               or row.get("ratio_vs_loaded_pairs")),
                                 ""]).strip())
    return lines


def _last_ok(res: dict[str, Any] | None) -> dict[str, Any] | None:
    """The latest finished result of a script: ``res`` itself when ok, else the one it kept."""
    if not isinstance(res, dict):
        return None
    if res.get("status") == "ok" and isinstance(res.get("figures"), dict):
        return {k: v for k, v in res.items() if k != "last_ok"}
    kept = res.get("last_ok")
    return kept if isinstance(kept, dict) and kept.get("status") == "ok" else None


def results_file(out: Path) -> Path:
    """Where the figures behind the Markdown file ``out`` are kept, as the scripts printed them:
    ``bench/history/results.json`` for the repository's BENCHMARKS.md, else beside ``out``."""
    if out.resolve() == (REPO_ROOT / "BENCHMARKS.md").resolve():
        return RESULTS_JSON
    return out.with_name(out.stem + ".results.json")


def render_markdown(results: dict[str, dict[str, Any]], machine: dict[str, Any], when: str, command: str,
                    results_name: str = "bench/history/results.json") -> str:
    """BENCHMARKS.md: every target and whether it holds, the machine, a summary row per script,
    then each script's figures (all of them, as printed, in ``results_name``)."""
    lines = [
        "# rulka benchmarks",
        "",
        f"Last written by `{command}` on {when}; each script's own command and date are below. "
        "Do not edit by hand: rerun `python -m bench` (`--only NAME` refreshes one script and keeps "
        "the others).",
        "",
        "The machine is shared and noisy; compare figures taken in the same run.",
    ]
    lines += targets_table(lambda name: _last_ok(results.get(name)), HISTORY_DIR, SCRIPTS)
    lines += [
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {key} | {format_number(value)} |" for key, value in machine.items()]
    lines += ["", "## Summary", "", "| script | measures | status | seconds | date | command |",
              "|---|---|---|---|---|---|"]
    ordered = [n for n in SCRIPTS if n in results] + sorted(n for n in results if n not in SCRIPTS)
    for name in ordered:
        res = results[name]
        lines.append(
            f"| {name} | {SCRIPTS.get(name, '')} | {res['status']} | {format_number(res.get('seconds'))} "
            f"| {res.get('date', '')} | `{res.get('command', '')}` |"
        )
    lines += peer_comparison(results)
    lines += trainer_loop_table(results)
    for name in ordered:
        res = results[name]
        lines += ["", f"## {name}", "", f"Command: `{res.get('command', '')}` ({res.get('date', '')})", ""]
        if res["status"] != "ok":
            lines.append(f"**{res['status']}**: {format_number(res.get('detail', ''))}")
            kept = _last_ok(res)
            if kept is None:
                continue
            lines += ["", f"Figures of the last run that finished: `{kept.get('command', '')}` "
                          f"({kept.get('date', '')}).", ""]
            res = kept
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {key} | {format_number(value)} |" for key, value in flatten(res["figures"], columns=True)]
    lines += ["", "## History", "", "Every study behind the learning targets (seed tables, repeated runs, "
              "track by track, GPU runs) is in `bench/history/README.md`, written with this file from "
              "the records in `bench/history/*.json`; the figures above, as each script printed them, "
              f"in `{results_name}` (what `--rewrite` and `--only` start from).", ""]
    return "\n".join(lines)


def write_files(out: Path, results: dict[str, dict[str, Any]], machine: dict[str, Any], when: str,
                command: str) -> None:
    """BENCHMARKS.md (``out``), the figures behind it (``results_file``) and, beside the default one,
    the history's tables."""
    data = results_file(out)
    shown = data.relative_to(REPO_ROOT).as_posix() if data.is_relative_to(REPO_ROOT) else data.name
    data.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    out.write_text(render_markdown(results, machine, when, command, shown), encoding="utf-8")
    if out.resolve() == (REPO_ROOT / "BENCHMARKS.md").resolve():
        HISTORY_MD.write_text(render_history(), encoding="utf-8")
        readme = REPO_ROOT / "README.md"
        readme.write_text(update_readme(readme.read_text(encoding="utf-8"), current_rows(results)),
                          encoding="utf-8")


def current_rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str, bool | None]]:
    """The targets' rows (``bench.targets.target_rows``) for ``results`` and the history's records."""
    return target_rows(lambda name: _last_ok(results.get(name)), HISTORY_DIR)


def previous_results(path: Path) -> dict[str, dict[str, Any]]:
    """The figures behind an earlier BENCHMARKS.md ``path`` (``results_file``; empty when absent or
    unreadable)."""
    try:
        data = json.loads(results_file(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def previous_machine(path: Path) -> dict[str, str]:
    """The "Machine" table of an earlier BENCHMARKS.md, as text (empty when absent)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    machine: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line == "## Machine"
        elif inside and line.startswith("| ") and not line.startswith("| |"):
            key, _, value = line.strip("| ").partition(" | ")
            machine[key] = value
    return machine


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=("Run rulka's benchmark scripts (each prints JSON) and rewrite BENCHMARKS.md with "
                     "their figures, the machine and the date. Scripts: " + ", ".join(SCRIPTS) + "."),
    )
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this script (repeatable or comma-separated); others keep their last results")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script (smaller, faster runs)")
    parser.add_argument("--script-args", default="", metavar="ARGS",
                        help="arguments for the one script named by --only, e.g. --only soak "
                             "--script-args '--workers 16 --minutes 10' (recorded in its command)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="per-script time limit in seconds (default 900, longer for the scripts in "
                             "SCRIPT_TIMEOUT_S, 300 with --quick)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "BENCHMARKS.md", metavar="FILE",
                        help="the Markdown file to rewrite (default: BENCHMARKS.md at the repo root)")
    parser.add_argument("--bench-dir", type=Path, default=BENCH_DIR, metavar="DIR",
                        help="where the scripts are (default: this bench/ folder)")
    parser.add_argument("--list", action="store_true", help="list the scripts and exit")
    parser.add_argument("--record", nargs=2, action="append", default=[], metavar=("NAME", "FILE"),
                        help="run nothing: take FILE (the JSON a script printed, e.g. on another machine) as "
                             "script NAME's latest result and rewrite the file (repeatable; --script-args "
                             "names the arguments it ran with, for its command)")
    parser.add_argument("--rewrite", action="store_true",
                        help="run nothing: rewrite the file from the results it already holds (after a format change)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    bench_dir = args.bench_dir.resolve()
    known = list(SCRIPTS)
    if bench_dir != BENCH_DIR:  # a foreign folder (tests, experiments): run whatever it holds
        known = sorted(p.stem for p in bench_dir.glob("*.py") if not p.stem.startswith("_"))
    if args.list:
        for name in known:
            print(f"{name:10s} {SCRIPTS.get(name, '')}")
        return 0
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if args.record:
        results = previous_results(args.out)
        for name, file in args.record:
            if name not in known:
                parser.error(f"unknown script {name}; choose from {', '.join(known)}")
            try:
                figures = parse_json_output(Path(file).read_text(encoding="utf-8"))
            except OSError as exc:
                parser.error(f"cannot read {file}: {exc}")
            if figures is None:
                parser.error(f"{file} holds no JSON object")
            command = " ".join([f"python -m bench.{name}", *shlex.split(args.script_args)])
            results[name] = {"name": name, "date": when, "status": "ok", "figures": figures,
                             "command": command, "recorded_from": str(file)}
        machine = previous_machine(args.out) or machine_info()
        write_files(args.out, results, machine, when,
                    "python -m bench" + "".join(f" --record {n} FILE" for n, _ in args.record))
        return 0
    if args.rewrite:
        results = previous_results(args.out)
        if not results:
            parser.error(f"{args.out} holds no earlier results to rewrite")
        machine = previous_machine(args.out) or machine_info()  # the machine the figures came from
        write_files(args.out, results, machine, when, "python -m bench --rewrite")
        return 0
    only = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = [n for n in only if n not in known]
    if unknown:
        parser.error(f"unknown script {', '.join(unknown)}; choose from {', '.join(known)}")
    selected = only or known
    extra = shlex.split(args.script_args)
    if extra and len(only) != 1:
        parser.error("--script-args needs exactly one --only script")
    earlier = previous_results(args.out)
    results = dict(earlier) if only else {}
    for name in selected:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        timeout_s = args.timeout if args.timeout is not None else (
            300.0 if args.quick else SCRIPT_TIMEOUT_S.get(name, DEFAULT_TIMEOUT_S))
        res = run_script(name, bench_dir, args.quick, timeout_s, extra)
        last_ok = _last_ok(earlier.get(name))
        if res["status"] != "ok" and last_ok is not None:
            res["last_ok"] = last_ok  # a failed or timed-out rerun does not wipe the figures it had
        results[name] = res
        print(f"bench: {name} {res['status']} ({res.get('seconds', 0)} s)"
              + (f": {res['detail']}" if res.get("detail") else ""), file=sys.stderr, flush=True)
    command = "python -m bench" + (" --quick" if args.quick else "") + "".join(f" --only {n}" for n in only)
    write_files(args.out, results, machine_info(), when, command)
    print(f"bench: wrote {args.out}", file=sys.stderr)
    return 0 if all(results[n]["status"] == "ok" for n in selected) else 1


if __name__ == "__main__":
    sys.exit(main())
