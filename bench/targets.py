"""The targets BENCHMARKS.md opens with: one row per goal a benchmark or a learning run is held to,
with the figure last measured, its date, and whether it holds.

A target of a benchmark script reads that script's latest finished figures (``results`` as
``python -m bench`` keeps them); a learning target reads the latest recorded run of each extended
learning test (``bench/history/extended_runs.json``) and of each shipped recipe's seed study
(``bench/history/recipe_studies.json``). Scripts whose figures have no goal (they describe, e.g. what
sharing a machine costs) are named under the table, so that the table is every target and no more.
This module only reads and formats; it runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.rows import Measured, Row, _date, _num, _read_rows, _short, dig
from bench.solver_targets import solver_targets
from bench.study_targets import (  # noqa: F401  (re-exported: the study rows' home before the split)
    LONG_RUN_TARGETS,
    RUN_TARGETS,
    adoptions,
    issue_goal_targets,
    judged_runs,
    recipe_targets,
    run_targets,
    study_arms,
    study_targets,
)


def _bounded(path: str, bound_path: str, unit: str = "", most: bool = False) -> Callable[[dict[str, Any]], Measured]:
    """The figure at ``path`` against the bound the script reports at ``bound_path``: at least it,
    or at most it with ``most``."""
    def measure(figures: dict[str, Any]) -> Measured:
        value, limit = dig(figures, path), dig(figures, bound_path)
        if not isinstance(value, int | float) or not isinstance(limit, int | float):
            return "-", None
        return f"{_num(value)}{unit}", value <= limit if most else value >= limit
    return measure


def _relay_min(figures: dict[str, Any]) -> Measured:
    speeds = dig(figures, "relay_mb_s")
    limit = dig(figures, "targets.relay_mb_s_min")
    if not isinstance(speeds, dict) or not speeds or not isinstance(limit, int | float):
        return "-", None
    slowest = min(speeds, key=lambda size: speeds[size])
    return f"{_num(speeds[slowest])} MB/s ({slowest} messages, the slowest size)", speeds[slowest] >= limit


def _ingest_best(figures: dict[str, Any]) -> Measured:
    runs = dig(figures, "ingest")
    rates = {k: v.get("transitions_per_s") for k, v in runs.items() if isinstance(v, dict)} if isinstance(runs, dict) else {}
    rates = {k: v for k, v in rates.items() if isinstance(v, int | float)}
    if not rates:
        return "-", None
    best = max(rates, key=lambda k: rates[k])
    return f"{_num(rates[best])} transitions/s ({best.replace('_', ' ')})", rates[best] >= 20_000


def _zero(*paths: str) -> Callable[[dict[str, Any]], Measured]:
    def measure(figures: dict[str, Any]) -> Measured:
        values = [dig(figures, p) for p in paths]
        if any(not isinstance(v, int) for v in values):
            return "-", None
        return ", ".join(f"{p.replace('_', ' ')} {v}" for p, v in zip(paths, values)), not any(values)
    return measure


def _trainer_rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    rows = figures.get("results")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _trainer_ratio(figures: dict[str, Any]) -> Measured:
    ratios = [r["ratio"] for r in _trainer_rows(figures) if isinstance(r.get("ratio"), int | float)]
    if not ratios:
        return "-", None
    return f"lowest {_num(min(ratios))} over {len(ratios)} configurations", min(ratios) >= 0.9


def _trainer_spi(figures: dict[str, Any]) -> Measured:
    spis = [r["spi_vs_target"] for r in _trainer_rows(figures) if isinstance(r.get("spi_vs_target"), int | float)]
    if not spis:
        return "-", None
    return (f"{_num(min(spis))} to {_num(max(spis))} over {len(spis)} configurations",
            all(abs(s - 1) <= 0.1 for s in spis))


def _cartpole_learners(figures: dict[str, Any]) -> Measured:
    parts, holds = [], True
    for name in ("ppo", "grpo", "dpo"):
        run = figures.get(name)
        if not isinstance(run, dict):
            return "-", None
        reached = run.get("reached") is True
        holds = holds and reached
        parts.append(f"{name} {'at ' + _num(run.get('env_steps')) + ' steps' if reached else 'not reached'}")
    return ", ".join(parts), holds


def _sac_vs_tmrl(figures: dict[str, Any]) -> Measured:
    ours, theirs = dig(figures, "rulka.env_steps_to_target"), dig(figures, "tmrl.env_steps_to_target")
    if not isinstance(ours, int | float):
        return "not reached" if "rulka" in figures else "-", False if "rulka" in figures else None
    shown = f"{_num(ours)} env steps, {_num(dig(figures, 'rulka.seconds_to_target'))} s"
    if isinstance(theirs, int | float):
        shown += f" (TMRL {_num(theirs)} steps, {_num(dig(figures, 'tmrl.seconds_to_target'))} s)"
    return shown, not isinstance(theirs, int | float) or ours <= theirs


def _e2e(figures: dict[str, Any]) -> Measured:
    if figures.get("finished") is True:
        seconds = figures.get("time_to_first_finish_s")
        return f"first finish after {_num(seconds)} s", True
    if figures.get("finished") is False:
        return "no finish within the time limit", False
    return "-", None


def _fleet_run(figures: dict[str, Any], scenario: str) -> dict[str, Any] | None:
    run = dig(figures, f"runs.{scenario}")
    return run if isinstance(run, dict) else None


def _fleet256(figures: dict[str, Any]) -> Measured:
    run = _fleet_run(figures, "fleet256")
    if run is None:
        return "-", None
    n, rss = dig(run, "config.workers"), dig(run, "relay.peak_rss_mb")
    lost, dup, slow = dig(run, "segments.lost"), dig(run, "segments.duplicated"), dig(run, "disconnects.slow_client")
    if not all(isinstance(x, int | float) for x in (n, rss, lost, dup, slow)):
        return "-", None
    text = f"{n} workers: relay peak RSS {_num(rss)} MB, {lost} lost, {dup} duplicated, {slow} cut off as slow"
    return text, n >= 256 and rss < 512 and lost == 0 and dup == 0 and slow == 0


def _fleet_guide_50mbit(figures: dict[str, Any], scenario: str = "guide_50mbit") -> Measured:
    run = _fleet_run(figures, scenario)
    if run is None:
        return "-", None
    st, reconnects = dig(run, "staleness"), dig(run, "disconnects.reconnects")
    if not isinstance(st, dict) or not isinstance(reconnects, int):
        return "-", None
    per = dig(run, "config.instances_per_worker")
    pcs = f" x {per} instances" if isinstance(per, int) and per > 1 else ""
    text = (f"{dig(run, 'config.workers')} workers{pcs} at {_num(dig(run, 'config.mbit'))} Mbit/s: at most "
            f"{st['max_versions_behind']} versions / {_num(st['max_seconds_behind'])} s behind, "
            f"{st['samples_over_bound']} of {st['samples']} samples over the bound, {reconnects} reconnects")
    return text, st["samples_over_bound"] == 0 and reconnects == 0


def _fleet_guide_unthrottled(figures: dict[str, Any]) -> Measured:
    run = _fleet_run(figures, "guide_unthrottled")
    reach = dig(run, "weights.reach") if run is not None else None
    if not isinstance(reach, list) or not reach:
        return "-", None
    p99 = [r.get("p99_s") for r in reach]
    if any(x is None for x in p99[:-1]) or p99[-1] is None and len(p99) == 1:
        return "a version never reached 99% of the workers", False
    worst = max(x for x in p99 if x is not None)
    return f"99% of {dig(run, 'config.workers')} workers in {_num(worst)} s at worst ({len(p99)} versions)", worst < 5.0


@dataclass(frozen=True)
class Target:
    script: str
    goal: str
    measure: Callable[[dict[str, Any]], Measured]


TARGETS: list[Target] = [
    Target("transport", "relay payload >= 80 MB/s over TLS at every message size",
           _relay_min),
    Target("transport", "26 MB of weights reach 4 workers in <= 1.5 s",
           _bounded("weights_26mb_to_4_workers_s", "targets.weights_26mb_to_4_workers_s_max", " s", most=True)),
    Target("sim", "simulator >= 5,000 actions/s with the image on one core",
           _bounded("with_image.actions_per_s", "target_actions_per_s_with_image", " actions/s")),
    Target("peer_tmrl", "<= 1,536 bytes on the wire per transition (64x64 grayscale, zstd)",
           _bounded("rulka.zstd.bytes_per_transition", "target_rulka_bytes_per_transition", " bytes", most=True)),
    Target("ingest", "one trainer ingests >= 20,000 transitions/s at 160x120 + 184 floats",
           _ingest_best),
    Target("trainer_loop", "trainer role >= 0.9 of the bare learner's updates/s, every configuration",
           _trainer_ratio),
    Target("trainer_loop", "samples per insert within 10% of the target, every configuration",
           _trainer_spi),
    Target("soak", "no segment lost or duplicated, no sequence number reused, through kills and stalls",
           _zero("segments_lost", "segments_duplicated", "sequence_numbers_reused")),
    Target("soak", "relay peak RSS within its bound",
           _bounded("relay_rss_peak_mb", "relay_rss_bound_mb", " MB", most=True)),
    Target("fleet", "256 workers: relay peak RSS < 512 MB, 0 segments lost or duplicated, none cut off as slow",
           _fleet256),
    Target("fleet", "40 guide-size workers through 50 Mbit/s: every policy <= 2 versions or 60 s behind, 0 reconnects",
           _fleet_guide_50mbit),
    Target("fleet", "the same 40 guide-size game instances as 10 PCs x 4 (`rulka-worker --instances 4`: one connection "
           "and one download per PC) through 50 Mbit/s: every policy <= 2 versions or 60 s behind, 0 reconnects",
           lambda figures: _fleet_guide_50mbit(figures, "guide_50mbit_pc4")),
    Target("fleet", "40 guide-size workers unthrottled: a new version reaches 99% of them in < 5 s",
           _fleet_guide_unthrottled),
    Target("sac_pendulum", "SAC reaches a mean return of -200 on Pendulum-v1, in no more env steps than TMRL",
           _sac_vs_tmrl),
    Target("policy_cartpole", "PPO, GRPO and DPO each reach a greedy 475 on CartPole-v1",
           _cartpole_learners),
    Target("actor", "guide-size network (160x120, dense 1024) >= 200 greedy decisions/s at batch 1 on one CPU core "
           "(the fastest path a worker runs that acts as eager)",
           _bounded("best_cpu.guide160x120.decisions_per_s", "targets.guide160x120_greedy_per_s_min", " decisions/s")),
    Target("actor", "48x36 image network >= 3,000 greedy decisions/s at batch 1 on one CPU core",
           _bounded("best_cpu.sim_image48x36.decisions_per_s", "targets.sim_image48x36_greedy_per_s_min", " decisions/s")),
    Target("actor", "GPU: guide-size network's batch-1 policy step <= 1.0 ms (worker.device: cuda)",
           _bounded("cuda_guide_step_ms", "targets.cuda_guide160x120_step_ms_max", " ms", most=True)),
    Target("tmnf_fake", "worker's own cost <= 0.3 ms per action, game in the worker's process (TMNF fake, 160x120)",
           _bounded("worker_own.ms_per_action_inproc", "targets.worker_own_ms_per_action_inproc_max", " ms", most=True)),
    Target("tmnf_fake", "worker's own cost <= 0.8 ms per action, game in its own process (TMNF fake, 160x120)",
           _bounded("worker_own.ms_per_action_process", "targets.worker_own_ms_per_action_process_max", " ms", most=True)),
    Target("tmnf_fake", "worker's own CPU <= 0.3 ms per action, game in the worker's process, less the game thread's CPU "
           "(here the fake game and the worker share one interpreter lock, which a real game never does)",
           _bounded("worker_own.cpu_ms_per_action_inproc", "targets.worker_own_ms_per_action_inproc_max", " ms", most=True)),
    Target("tmnf_fake", "worker's own CPU <= 0.8 ms per action, game in its own process (the worker process's CPU time; "
           "the wall row above also counts the waits for the game's replies)",
           _bounded("worker_own.cpu_ms_per_action_process", "targets.worker_own_ms_per_action_process_max", " ms", most=True)),
    Target("tmnf_fake", "GPU: a TMNF fake instance with the guide-size network >= 200 actions/s (10x game speed)",
           _bounded("cuda_guide_instance_actions_per_s", "targets.cuda_guide_instance_actions_per_s_min", " actions/s")),
    Target("e2e", "the default `rulka run` finishes the track within its time limit",
           _e2e),
]


REPO = Path(__file__).resolve().parents[1]


def _test_gone(test: str) -> bool:
    """Whether ``tests/x.py::test_y`` names a test file of this repository that no longer defines
    ``test_y`` (renamed when its bar changed): its recorded outcome judged a test nobody runs."""
    file, sep, name = test.partition("::")
    path = REPO / file
    if not sep or not path.is_file():
        return False
    return f"def {name.rpartition('::')[2]}(" not in path.read_text(encoding="utf-8")


def extended_targets(path: Path, superseded: list[Row] | None = None) -> list[Row]:
    """Each extended learning test's latest run that measured something (rows whose outcome is
    'not run' are skipped): (source, goal, last measured, date, holds). A row may name in
    ``supersedes`` the recorded runs it replaces (a recipe's "(no test yet)" runs, once a test runs
    that recipe): those older than it go to ``superseded`` (listed under the table, not counted)."""
    latest: dict[str, dict[str, Any]] = {}
    replaced: dict[str, str] = {}  # test name -> the date of the newest row that supersedes it
    for row in _read_rows(path):
        outcome = str(row.get("outcome", ""))
        if outcome.startswith("not run"):
            continue
        test = str(row.get("test", ""))
        if test not in latest or _date(row) >= _date(latest[test]):
            latest[test] = row
        if row.get("supersedes"):
            name = str(row["supersedes"])
            replaced[name] = max(replaced.get(name, ""), _date(row))
    gone = {test for test, row in latest.items() if test in replaced and _date(row) <= replaced[test]}
    renamed = {test for test in latest if _test_gone(test)}
    out = []
    for test, row in sorted(latest.items()):
        if "::" in test:
            source, goal = test.partition("::")[0], test.rpartition("::")[2].removeprefix("test_").replace("_", " ")
        else:  # a recorded run of a recipe without a test yet: "configs/x.yaml (no test yet)"
            source, goal = test.partition(" (")[0], "recorded learning run (no test yet)"
        outcome = str(row.get("outcome", ""))
        shown = _short(outcome)
        if test in renamed and test not in gone:
            if superseded is not None:
                superseded.append((f"`{source}`", goal, "superseded: the test is no longer in its file (replaced by "
                                   "one with another bar): " + shown, _date(row), outcome.startswith("pass")))
            continue
        if test in gone:
            if superseded is not None:
                superseded.append((f"`{source}`", goal, f"superseded by a test of the recipe ({replaced[test]}): "
                                   + shown, _date(row), outcome.startswith("pass")))
            continue
        out.append((f"`{source}`", goal, shown, _date(row), outcome.startswith("pass")))
    return out


def cuda_targets(path: Path) -> list[tuple[str, str, str, str, bool | None]]:
    """The goals checked on a lent GPU machine (``bench/history/cuda_runs.json`` rows with ``target``): the
    latest row of each check."""
    latest: dict[str, dict[str, Any]] = {}
    for row in _read_rows(path):
        if row.get("target") and _date(row) >= _date(latest.get(str(row.get("check")), {})):
            latest[str(row.get("check"))] = row
    out = []
    for check, row in sorted(latest.items()):
        holds = row.get("holds")
        out.append(("`bench/cuda_check.sh`", check, _short(str(row.get("result", ""))), _date(row),
                    holds if isinstance(holds, bool) else None))
    return out


def target_rows(last_ok: Callable[[str], dict[str, Any] | None], bench_dir: Path,
                superseded: list[Row] | None = None) -> list[Row]:
    """Every target as (source, goal, last measured, date, holds): the benchmarks' from
    ``last_ok(name)``, the learning runs' from the records in ``bench_dir``. No row leaves because it
    fails: the learner-fix comparisons and the issue studies' goals are rows too. A row that judges a
    recipe since replaced goes to ``superseded`` (shown under the table, not counted)."""
    rows: list[tuple[str, str, str, str, bool | None]] = []
    for target in TARGETS:
        res = last_ok(target.script)
        if res is None:
            rows.append((f"`{target.script}`", target.goal, "not measured", "", None))
            continue
        shown, holds = target.measure(res.get("figures", {}))
        rows.append((f"`{target.script}`", target.goal, shown, str(res.get("date", "")), holds))
    rows += extended_targets(bench_dir / "extended_runs.json", superseded)
    rows += recipe_targets(bench_dir / "recipe_studies.json", adoptions(bench_dir / "run_studies.json"), superseded)
    rows += run_targets(bench_dir / "run_studies.json", superseded)
    rows += solver_targets(bench_dir / "run_studies.json")
    rows += issue_goal_targets(bench_dir / "issue_studies.json")
    rows += study_targets(bench_dir / "learner_fix_studies.json")
    rows += cuda_targets(bench_dir / "cuda_runs.json")
    return rows


def targets_table(last_ok: Callable[[str], dict[str, Any] | None], bench_dir: Path,
                  described: dict[str, str]) -> list[str]:
    """The Markdown lines of the targets table. ``last_ok(name)`` gives a script's latest finished
    result (``figures``, ``date``) or None; ``described`` names every script, for the line under the
    table listing the scripts that have figures but no target."""
    superseded: list[Row] = []
    rows = target_rows(last_ok, bench_dir, superseded)
    held = sum(1 for r in rows if r[4] is True)
    failing = sum(1 for r in rows if r[4] is False)
    lines = ["", "## Targets", "",
             f"Every goal a benchmark or a learning run is held to, with the figure last measured: "
             f"{held} of {len(rows)} hold, {failing} do not, {len(rows) - held - failing} are not measured or not "
             f"decided; {len(superseded)} more rows judge recipes since replaced: they are listed under the table, "
             "marked superseded, and not counted. No row leaves the table because it fails (the learner-fix "
             "comparisons and the goals an issue study answered are rows too). A benchmark's row reads its "
             "latest finished run (its section below); a learning row reads the latest recorded run of that "
             "test or recipe (its study in `bench/history/README.md`); a seed study's goal names the runs it "
             "asks for, fixed before the study, and its row the seeds it ran.", "",
             "| source | goal | last measured | date | holds |", "|---|---|---|---|---|"]
    verdicts = {True: "yes", False: "**no**", None: "-"}
    for source, goal, shown, date, holds in rows:
        lines.append(f"| {source} | {goal} | {shown.replace('|', '/')} | {date} | {verdicts[holds]} |")
    if superseded:
        lines += ["", f"Superseded, not counted ({len(superseded)} rows: their recipe has since been replaced; "
                  "each says by what):", "", "| source | goal | last measured | date | held then |",
                  "|---|---|---|---|---|"]
        for source, goal, shown, date, holds in superseded:
            lines.append(f"| {source} | {goal} | {shown.replace('|', '/')} | {date} | {verdicts[holds]} |")
    with_target = {t.script for t in TARGETS}
    free = [name for name in described if name not in with_target]
    if free:
        lines += ["", "Figures without a target (they describe rather than judge): "
                  + ", ".join(f"`{name}`" for name in free) + "."]
    return lines
