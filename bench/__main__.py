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

from bench.readme import update_readme
from bench.targets import dig as _dig
from bench.targets import study_arms, target_rows, targets_table

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
# the studies' records (seed studies, learning runs, GPU runs) and their tables: kept out of
# BENCHMARKS.md, which holds the targets and each script's latest figures (not in sdist or wheel)
HISTORY_DIR = BENCH_DIR / "history"
HISTORY_MD = HISTORY_DIR / "README.md"

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
RESULTS_MARK = "<!-- bench-results:"
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


def flatten(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts/lists -> ``[("a.b", value), ...]`` in their original order."""
    if isinstance(obj, dict):
        rows: list[tuple[str, Any]] = []
        for key, value in obj.items():
            rows += flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return rows
    if isinstance(obj, list) and any(isinstance(v, dict | list) for v in obj):
        rows = []
        for i, value in enumerate(obj):
            rows += flatten(value, f"{prefix}[{i}]")
        return rows
    return [(prefix, obj)]


def format_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(format_number(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


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


def render_markdown(results: dict[str, dict[str, Any]], machine: dict[str, Any], when: str, command: str) -> str:
    """BENCHMARKS.md: every target and whether it holds, the machine, a summary row per script,
    then each script's figures."""
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
        lines += [f"| {key} | {format_number(value)} |" for key, value in flatten(res["figures"])]
    lines += ["", "## History", "", "Every study behind the learning targets (seed tables, repeated runs, "
              "track by track, GPU runs) is in `bench/history/README.md`, written with this file from "
              "the records in `bench/history/*.json`."]
    lines += ["", f"{RESULTS_MARK} {json.dumps(results, sort_keys=True)} -->", ""]
    return "\n".join(lines)


def render_history(history: Path = HISTORY_DIR) -> str:
    """bench/history/README.md: the tables of every recorded study, from the JSON beside it."""
    lines = ["# rulka benchmark history", "",
             "Generated by `python -m bench` from the records in this folder (do not edit by hand). "
             "BENCHMARKS.md holds the targets and each script's latest figures; this file every "
             "study behind them."]
    lines += extended_runs(history / "extended_runs.json")
    lines += recipe_studies(history / "recipe_studies.json")
    lines += learner_fix_studies(history / "learner_fix_studies.json")
    lines += run_studies(history / "run_studies.json")
    lines += issue_studies(history / "issue_studies.json")
    lines += track_results(history / "track_results.json")
    lines += cuda_runs(history / "cuda_runs.json")
    return "\n".join(lines) + "\n"


def write_files(out: Path, results: dict[str, dict[str, Any]], machine: dict[str, Any], when: str,
                command: str) -> None:
    """BENCHMARKS.md (``out``) and, beside the default one, the history's tables."""
    out.write_text(render_markdown(results, machine, when, command), encoding="utf-8")
    if out.resolve() == (REPO_ROOT / "BENCHMARKS.md").resolve():
        HISTORY_MD.write_text(render_history(), encoding="utf-8")
        readme = REPO_ROOT / "README.md"
        readme.write_text(update_readme(readme.read_text(encoding="utf-8"), current_rows(results)),
                          encoding="utf-8")


def current_rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str, bool | None]]:
    """The targets' rows (``bench.targets.target_rows``) for ``results`` and the history's records."""
    return target_rows(lambda name: _last_ok(results.get(name)), HISTORY_DIR)


def extended_runs(path: Path) -> list[str]:
    """The outcomes of the ``extended`` learning runs, from ``bench/history/extended_runs.json`` (a list of
    rows with test, outcome, minutes, date, machine, command, note; add a row after a run)."""
    return _json_table(path, ("test", "outcome", "minutes", "date", "machine", "command", "note"),
                       "Extended learning runs",
                       "Outcomes of the tests marked `extended` (too long for CI), recorded by hand in "
                       "`bench/history/extended_runs.json`.")


def recipe_studies(path: Path) -> list[str]:
    """Seed studies of learning recipes, from ``bench/history/recipe_studies.json`` (rows appended by
    ``python -m bench.study recipe ... --record``)."""
    return _json_table(path, ("config", "overrides", "target", "reached", "reached_at_frames", "frames",
                              "minutes", "date", "machine", "command", "note"),
                       "Recipe studies (seeds)",
                       "One recipe, several seeds, the trainer's schedule without the network "
                       "(`bench/study/recipe.py`, deterministic per seed): in how many seeds the greedy policy "
                       "reached the target within the frame budget. Rows in `bench/history/recipe_studies.json`.")


def learner_fix_studies(path: Path) -> list[str]:
    """Seed studies of the learner fixes (issue 31), from ``bench/history/learner_fix_studies.json``: one row
    per arm (date, command, seeds, per seed the env steps to a greedy 475 and the best greedy
    average), then the studies recorded as one run (their ``result``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    studies = [s for s in data.get("studies", []) if isinstance(s, dict)] if isinstance(data, dict) else []
    arms = study_arms(path)
    if not arms and not studies:
        return []
    lines = ["", "## Learner-fix studies (seeds)", "",
             "The learner fixes of issue 31 on CartPole-v1, deterministic and frame-budgeted: GRPO's "
             "`grpo.grpo_objective` reinforce vs clipped with the workers' weights `lag` updates behind "
             "(`bench/learner_fix_studies.py grpo`), NoisyNet with epsilon 0 vs the epsilon schedule and "
             "IQN weight decay / self-loss clamp on vs off (`bench/study/recipe.py`). Per seed: the env steps "
             "at which the greedy average first reached 475 (`-`: not within the budget) and the best "
             "greedy average. Rows in `bench/history/learner_fix_studies.json`"
             + (f" ({format_number(data.get('machine'))})" if data.get("machine") else "") + ".", "",
             "| study | arm | seeds | frames | reached 475 at | best greedy | date | command |",
             "|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        lines.append(" | ".join(["", arm["study"], arm["arm"], format_number(arm["seeds"]),
                                 format_number(arm["frames"]), format_number(arm["reached"]),
                                 format_number(arm["best"]), arm["date"], f"`{arm['command']}`", ""]).strip())
    for study in studies:
        result = study.get("result")
        if not isinstance(result, dict):
            continue
        lines += ["", f"{study.get('name', '')} ({study.get('date', '')}): `{study.get('command', '')}`", "",
                  "| figure | value |", "|---|---|"]
        lines += [f"| {key} | {format_number(value)} |" for key, value in flatten(result)]
        if study.get("note"):
            lines += ["", format_number(study["note"])]
    return lines


def _race(outcome: dict[str, Any] | None) -> str:
    """One greedy race in a table cell: the time, or the metres of an unfinished race; with the
    median of the races from perturbed starts beside it when the study raced them."""
    if not outcome:
        return "-"
    text = (f"{outcome['race_time_s']:.2f} s" if outcome.get("finished")
            else f"{max(outcome.get('progress_m') or 0.0, 0.0):.0f} m")
    if "perturbed_s" in outcome:
        level = outcome["perturbed_s"]
        text += f" ({len(outcome.get('perturbed_times_s') or [])} starts: " + (
            f"{level:.2f} s)" if level is not None else "not finished)")
    return text


def _studies(path: Path) -> list[dict[str, Any]]:
    """The ``studies`` list of a ``{"studies": [...]}`` record file (empty when missing or unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [s for s in data.get("studies", []) if isinstance(s, dict)] if isinstance(data, dict) else []


def run_studies(path: Path) -> list[str]:
    """Repeated `rulka run`s of one config per arm, from ``bench/history/run_studies.json`` (``python
    bench/study/runs.py ... --record NOTE``): per run the frames, the exploring workers' first finish,
    the greedy race of the best policy and of the final weights on the run's track, divergence."""
    studies = _studies(path)
    if not studies:
        return []
    lines = ["", "## Repeated runs (as a user runs them)", "",
             "One config run several times with `rulka run` (`bench/study/runs.py`; a distributed run is not "
             "repeatable, so each run is one more draw), per arm: the frames the trainer received, the "
             "exploring workers' first finish, the greedy race on the run's track of the best policy "
             "(`rulka eval RUN`) and of the final weights (`rulka eval RUN --final`), and whether the "
             "learner's health went over the divergence thresholds. Rows in `bench/history/run_studies.json`."]
    for study in studies:
        track = ""
        lines += ["", f"### {study.get('name', '')} ({study.get('date', '')})", "",
                  f"`{study.get('command', '')}` ({format_number(study.get('machine', ''))})", ""]
        if study.get("target_return") is not None:
            lines += _gym_study(study)
            continue
        if study.get("map_cycle"):
            lines += _cycle_study(study)
            continue
        averaged = _has_average(study)  # runs with trainer.average_policy_frames: one more column
        # runs that ended on their average (training.lr_cooldown_end_on_average): the weights trained last
        trained = _has_average(study, "trained")
        lines += ["| arm | run (seed) | frames | updates | minutes | first finish (frames) | best | final | "
                  + ("averaged | " if averaged else "") + ("trained last | " if trained else "") + "scripted | diverged |",
                  "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if averaged else "") + ("---|" if trained else "")]
        for arm in study.get("arms", []):
            track = (arm.get("summary") or {}).get("track", track)
            for i, run in enumerate(arm.get("runs", [])):
                first = (run.get("first_finish") or {}).get(track) or {}
                best = (run.get("best") or {}).get("tracks", {}).get(track)
                final = (run.get("final") or {}).get("tracks", {}).get(track)
                scripted = (best or final or {}).get("scripted_s")
                lines.append(" | ".join(["", str(arm.get("arm", "")), str(run.get("seed", i)), format_number(run.get("frames")),
                                         format_number(run.get("updates")), format_number(run.get("wall_minutes")),
                                         format_number(first.get("frames", "-")), _race(best), _race(final),
                                         *([_race((run.get("average") or {}).get("tracks", {}).get(track))]
                                           if averaged else []),
                                         *([_race((run.get("trained") or {}).get("tracks", {}).get(track))]
                                           if trained else []),
                                         f"{scripted:.2f} s" if scripted else "-",
                                         ", ".join((run.get("health") or {}).get("diverged", [])) or "no",
                                         ""]).strip())
        for arm in study.get("arms", []):
            s = arm.get("summary") or {}
            lines.append("")
            lines.append(f"{arm.get('arm', '')} on `{s.get('track', '')}`: best policy beats the scripted driver in "
                         f"{s.get('best_beats_scripted')} of {s.get('runs')} runs (finishes in {s.get('best_finished')}), "
                         f"final weights in {s.get('final_beats_scripted')} (finish in {s.get('final_finished')}); "
                         + (f"averaged weights in {s.get('average_beats_scripted')} of the {_count_average(arm)} runs "
                            f"that kept them (finish in {s.get('average_finished')}); " if _count_average(arm) else "")
                         + (f"the weights trained last (before the run ended on its average) in "
                            f"{s.get('trained_beats_scripted')} of {_count_average(arm, 'trained')} (finish in "
                            f"{s.get('trained_finished')}); " if _count_average(arm, "trained") else "")
                         + _perturbed_text(s)
                         + (f"in-run greedy races of the runs' last fifth: {s['late_beats_scripted']} of "
                            f"{s['late_races']} beat it; " if s.get("late_races") else "")
                         + (f"final weights no slower than the run's in-run races at {format_number(s['at_minutes'])} "
                            f"minutes (median of that point's last fifth) in {s.get('final_no_slower_than_at')} of "
                            f"{s.get('at_minutes_runs')}; " if s.get("at_minutes") else "")
                         + f"diverged: {s.get('diverged')}.")
        if study.get("note"):
            lines += ["", format_number(study["note"])]
    return lines


def _perturbed_text(summary: dict[str, Any]) -> str:
    """The summary's counts of policies whose median race from perturbed starts beats the scripted
    driver (``bench/study/runs.py --perturbed-races``); empty when the study raced none."""
    names = {"best": "best", "final": "final", "average": "averaged", "trained": "trained last"}
    parts = [f"{label} {summary[f'{w}_perturbed_beats_scripted']}" for w, label in names.items()
             if f"{w}_perturbed_beats_scripted" in summary]
    return f"median of the races from perturbed starts under it: {', '.join(parts)}; " if parts else ""


def _has_average(study: dict[str, Any], which: str = "average") -> bool:
    """Whether a run of the study kept ``which`` (see ``_count_average``; averaged weights by default)."""
    return any(_count_average(arm, which) for arm in study.get("arms", []))


def _count_average(arm: dict[str, Any], which: str = "average") -> int:
    """The arm's runs that kept ``which`` (``average``: averaged weights; ``trained``: the weights
    trained last of a run that ended on its average)."""
    return sum(which in run for run in arm.get("runs", []))


def _cycle_study(study: dict[str, Any]) -> list[str]:
    """A map-cycle config's repeated runs: per policy, the bundled tracks it beats the scripted driver
    on and the generated tracks (never seen, seeds drawn by the study) it finishes; then the best
    policy's race on each track."""
    gen_seeds = study.get("gen_seeds") or []
    policies = [p for p in ("best", "final", "average")
                if any(p in run for arm in study.get("arms", []) for run in arm.get("runs", []))]
    label = {"best": "best", "final": "final", "average": "averaged"}

    def counts(run: dict[str, Any], policy: str) -> list[str]:
        c = (run.get(policy) or {}).get("counts")
        if not c:
            return ["-", "-"]
        return [f"{c['bundled_beats_scripted']} of {c['bundled']} ({c['bundled_finished']} finished)",
                f"{c['gen_finished']} of {c['gen']}" if c.get("gen") else "-"]

    lines = ["| arm | seed | frames | updates | minutes | "
             + " | ".join(f"{label[p]}: tracks beaten | {label[p]}: generated finished" for p in policies)
             + " | diverged |", "|---|---|---|---|---|" + "---|---|" * len(policies) + "---|"]
    scripted: dict[str, float | None] = {}  # every track the best policies raced, in order, and its scripted time
    for arm in study.get("arms", []):
        for i, run in enumerate(arm.get("runs", [])):
            for t, row in (run.get("best") or {}).get("tracks", {}).items():
                scripted.setdefault(t, row.get("scripted_s"))
            lines.append(" | ".join(["", str(arm.get("arm", "")), str(run.get("seed", i)), format_number(run.get("frames")),
                                     format_number(run.get("updates")), format_number(run.get("wall_minutes")),
                                     *[cell for p in policies for cell in counts(run, p)],
                                     ", ".join((run.get("health") or {}).get("diverged", [])) or "no", ""]).strip())
    tracks = list(scripted)
    lines += ["", "The best policy's greedy race per track (* faster than the scripted driver):", "",
              "| arm | seed | " + " | ".join(tracks) + " |", "|---|---|" + "---|" * len(tracks)]
    lines.append("| scripted driver | | " + " | ".join(f"{scripted[t]:.2f} s" if scripted.get(t) else "-"
                                                     for t in tracks) + " |")
    for arm in study.get("arms", []):
        for i, run in enumerate(arm.get("runs", [])):
            best = (run.get("best") or {}).get("tracks", {})
            lines.append(" | ".join(["", str(arm.get("arm", "")), str(run.get("seed", i)),
                                     *[_race(best.get(t)) + ("*" if (best.get(t) or {}).get("beats_scripted") else "")
                                       for t in tracks], ""]).strip())
    for arm in study.get("arms", []):
        s = arm.get("summary") or {}
        parts = [f"{label[p]} beats the scripted driver on {', '.join(str(x) for x in s.get(f'{p}_beats_scripted', []))} "
                 f"of {s.get('bundled')} bundled tracks"
                 + (f" and finishes {', '.join(str(x) for x in s.get(f'{p}_gen_finished', []))} of {s.get('gen')} "
                    "generated ones" if s.get("gen") else "")
                 for p in policies if f"{p}_beats_scripted" in s]
        lines += ["", f"{arm.get('arm', '')}, per run: " + "; ".join(parts) + f"; diverged: {s.get('diverged')}."]
    if gen_seeds:
        lines += ["", "Generated tracks (seeds drawn when the study started): "
                  + ", ".join(f"gen:{g}" for g in gen_seeds) + "."]
    if study.get("note"):
        lines += ["", format_number(study["note"])]
    return lines


def _gym_study(study: dict[str, Any]) -> list[str]:
    """A Gymnasium config's repeated runs: the greedy mean return of best/ and of the final weights."""
    target = study["target_return"]

    def ret(r: dict[str, Any] | None) -> str:
        return "-" if not r or r.get("return_mean") is None else f"{r['return_mean']:.1f}"

    averaged = _has_average(study)
    lines = [f"| arm | seed | frames | updates | minutes | best (mean of {study.get('eval_episodes', '')}) | final | "
             + ("averaged | " if averaged else "") + "diverged |",
             "|---|---|---|---|---|---|---|---|" + ("---|" if averaged else "")]
    for arm in study.get("arms", []):
        for i, run in enumerate(arm.get("runs", [])):
            lines.append(" | ".join(["", str(arm.get("arm", "")), str(run.get("seed", i)), format_number(run.get("frames")),
                                     format_number(run.get("updates")), format_number(run.get("wall_minutes")),
                                     ret(run.get("best")), ret(run.get("final")),
                                     *([ret(run.get("average"))] if averaged else []),
                                     ", ".join((run.get("health") or {}).get("diverged", [])) or "no", ""]).strip())
    for arm in study.get("arms", []):
        s = arm.get("summary") or {}
        lines += ["", f"{arm.get('arm', '')}: best policy reaches {format_number(target)} in {s.get('best_reaches_target')} "
                  f"of {s.get('runs')} runs, final weights in {s.get('final_reaches_target')}; "
                  + (f"averaged weights in {s.get('average_reaches_target')} of the {_count_average(arm)} runs that "
                     "kept them; " if _count_average(arm) else "")
                  + f"diverged: {s.get('diverged')}."]
    if study.get("note"):
        lines += ["", format_number(study["note"])]
    return lines


def issue_studies(path: Path) -> list[str]:
    """Small studies an issue asked for, each one table, from ``bench/history/issue_studies.json``
    (``{"studies": [{name, date, command, columns, rows, note}]}``, written with the study)."""
    studies = _studies(path)
    if not studies:
        return []
    lines = ["", "## Issue studies", "", "Small comparisons an issue asked for, one table each, "
             "recorded in `bench/history/issue_studies.json` with the command that made them."]
    for study in studies:
        columns = [str(c) for c in study.get("columns", [])]
        lines += ["", f"### {study.get('name', '')} ({study.get('date', '')})", "", f"`{study.get('command', '')}`", "",
                  "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in study.get("rows", [])]
        if study.get("note"):
            lines += ["", format_number(study["note"])]
    return lines


def track_results(path: Path) -> list[str]:
    """Learning runs track by track, from ``bench/history/track_results.json`` (rows appended by
    ``python -m bench.study tracks record``)."""
    return _json_table(path, ("run", "track", "trained_on", "first_finish_min", "first_finish_frames", "greedy",
                              "scripted_s", "beats_scripted", "date", "command"),
                       "Learning runs track by track",
                       "One trained policy per run, driven greedily on each bundled track and on generated "
                       "`gen:<seed>` tracks (`bench/study/tracks.py`): the exploring workers' first finish on the "
                       "track (minutes, frames; blank: never trained there or never finished), the greedy race "
                       "time against the scripted driver's. Until 2026-11-24 IQN's greedy action averaged sampled "
                       "quantile fractions and repeated races of one policy differed by up to 10 s: rows "
                       "marked 'median of 5' raced each track 5 times (unfinished races rank last). Since "
                       "then it averages fixed midpoints and one greedy race is reproducible.")


def cuda_runs(path: Path) -> list[str]:
    """What a session lent a GPU machine measured there, from ``bench/history/cuda_runs.json`` (rows added
    by hand from ``bash bench/cuda_check.sh``'s output; ``raw`` keeps the scripts' JSON)."""
    return _json_table(path, ("check", "result", "date", "machine", "command", "note"),
                       "CUDA (a lent GPU machine)",
                       "Checks run on a GPU machine lent to a session for minutes (`bench/cuda_check.sh` runs "
                       "them in one call). CI and this file's other sections run on the 2-core CPU machine; "
                       "the figures here are from another machine and compare only with each other.")


def _json_table(path: Path, keys: tuple[str, ...], title: str, intro: str) -> list[str]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(rows, list) or not rows:
        return []
    lines = ["", f"## {title}", "", intro, "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        if isinstance(row, dict):
            lines.append("| " + " | ".join(str(row.get(k, "")).replace("|", "/") for k in keys) + " |")
    return lines


def previous_results(path: Path) -> dict[str, dict[str, Any]]:
    """Results embedded in an earlier BENCHMARKS.md (empty when absent or unreadable)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    start = text.rfind(RESULTS_MARK)
    if start < 0:
        return {}
    body = text[start + len(RESULTS_MARK):]
    end = body.rfind("-->")
    try:
        data = json.loads(body[:end])
    except ValueError:
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
