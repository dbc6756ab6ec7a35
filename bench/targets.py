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

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Measured = tuple[str, bool | None]  # (the figure as shown, holds: True / False / None = not measured)
Row = tuple[str, str, str, str, bool | None]  # (source, goal, last measured, date, holds)


def dig(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


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


def _fleet_guide_50mbit(figures: dict[str, Any]) -> Measured:
    run = _fleet_run(figures, "guide_50mbit")
    if run is None:
        return "-", None
    st, reconnects = dig(run, "staleness"), dig(run, "disconnects.reconnects")
    if not isinstance(st, dict) or not isinstance(reconnects, int):
        return "-", None
    text = (f"{dig(run, 'config.workers')} workers at {_num(dig(run, 'config.mbit'))} Mbit/s: at most "
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
    Target("tmnf_fake", "GPU: a TMNF fake instance with the guide-size network >= 200 actions/s (10x game speed)",
           _bounded("cuda_guide_instance_actions_per_s", "targets.cuda_guide_instance_actions_per_s_min", " actions/s")),
    Target("e2e", "the default `rulka run` finishes the track within its time limit",
           _e2e),
]


def _short(text: str) -> str:
    """A learning row's outcome as the targets table shows it (160 characters at most)."""
    return text if len(text) <= 160 else text[:157] + "..."


def _date(row: dict[str, Any]) -> str:
    return str(row.get("date", ""))


def _read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


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


def adoptions(path: Path) -> dict[str, tuple[str, str]]:
    """Per config file name, the last time a study's arm became the shipped file
    (``bench/history/run_studies.json`` studies with ``shipped_arm``): (the earliest date a study names
    that arm as shipped, the arm). A row judging that config on runs from before then, of another
    arm, judges a recipe since replaced."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    named = [s for s in (data.get("studies", []) if isinstance(data, dict) else [])
             if isinstance(s, dict) and s.get("shipped_arm") and _shipped_arm(s) is not None]
    out: dict[str, tuple[str, str]] = {}
    for study in sorted(named, key=_date):
        config, arm = Path(str(study.get("config", ""))).name, str(study["shipped_arm"])
        if config not in out or out[config][1] != arm:
            out[config] = (_date(study), arm)
    return out


def _replaced_by(adopted: dict[str, tuple[str, str]], config: str, date: str, arm: str | None) -> str | None:
    """The words that say a row is superseded (its recipe was replaced after ``date``), or None."""
    since = adopted.get(Path(config).name)
    if since is None or date >= since[0] or arm == since[1]:
        return None
    return f"superseded: `{Path(config).name}` took the arm `{since[1]}` from {since[0]}"


def _sort(row: Row, gone: str | None, out: list[Row], superseded: list[Row] | None) -> None:
    """``row`` into ``out``, or, when ``gone`` says why it is superseded, into ``superseded`` with why."""
    if not gone:
        out.append(row)
    elif superseded is not None:
        superseded.append((*row[:2], f"{gone}; {row[2]}", *row[3:]))


def recipe_targets(path: Path, adopted: dict[str, tuple[str, str]] | None = None,
                   superseded: list[Row] | None = None) -> list[Row]:
    """Each shipped recipe's latest seed study (no overrides): reached in every seed or not; with
    ``adopted`` (``adoptions``), a study from before its config took other settings goes to
    ``superseded``."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in _read_rows(path):
        if str(row.get("overrides", "-")).strip() not in ("", "-"):
            continue
        key = (str(row.get("config", "")), str(row.get("target", "")))
        if key not in latest or _date(row) >= _date(latest[key]):
            latest[key] = row
    out = []
    for (config, target), row in latest.items():
        reached = str(row.get("reached", ""))
        got, _, of = reached.partition(" ")[0].partition("/")
        holds = got.isdigit() and of.isdigit() and got == of
        seeds = f"each of {of} seeds" if of.isdigit() else "every seed"
        line = ("`bench/study/recipe.py`", f"`{config}` greedy reaches {target} in {seeds} within "
                f"{_num(int(row['frames'])) if str(row.get('frames', '')).isdigit() else row.get('frames', '?')} frames",
                f"{reached} seeds", _date(row), holds)
        _sort(line, _replaced_by(adopted or {}, config, _date(row), None), out, superseded)
    return out


RUN_TARGETS = {
    # study name (bench/study/runs.py --name) -> (runs, best policy beats the scripted driver in, final weights in);
    # a Gymnasium study (--target-return): the best policy / final weights reach the target return in
    "readme_main_command": (5, 5, 4),
    "cartpole_iqn_runs": (10, 9, 0),
    # a map-cycle study (bench/study/runs.py --gen-random): (runs, bundled tracks the best policy beats the
    # scripted driver on in each run, generated tracks it finishes in each run, of how many generated)
    "map_cycle_runs": (3, 5, 8, 10),
}
"""Issue 32's goals for studies of repeated `rulka run`s (``bench/history/run_studies.json``)."""
# a study of a run longer than the README's (bench/study/runs.py --minutes 80 --at-minutes 20): (runs, of
# which the final weights race no slower than the run's own in-run races at --at-minutes)
LONG_RUN_TARGETS = {"sim_iqn_long": (1, 1)}


def _short_of(got: int, needed: int, runs: int, runs_needed: int) -> bool:
    """Whether ``got`` of ``runs`` runs falls short of ``needed`` of ``runs_needed``: counting the missing runs
    as successes while fewer were made, held to the goal's share once more were made."""
    if runs > runs_needed:
        return got * runs_needed < needed * runs
    return got + max(runs_needed - runs, 0) < needed


def _shipped_name(study: dict[str, Any]) -> str:
    """The name of the arm that is the config as it ships: ``as_shipped``, or the arm a study names in
    ``shipped_arm`` where the shipped file took that arm's settings after the study (set on the study
    that decided it and on the earlier studies of that arm: its runs are the shipped recipe's, the
    ``as_shipped`` arm was the file before; studies pooled with ``same_recipe_as`` give theirs)."""
    return str(study.get("shipped_arm") or "as_shipped")


def _shipped_arm(study: dict[str, Any]) -> dict[str, Any] | None:
    """The study's arm that is the config as it ships (``_shipped_name``), or None."""
    name = _shipped_name(study)
    return next((a for a in study.get("arms", []) if a.get("arm") == name), None)


def _seeds(runs: Sequence[dict[str, Any]]) -> str:
    """`` [seeds 0-4]`` / `` [seeds 0, 2, 7]``: the seeds of a study's runs (empty when none is recorded)."""
    seeds = sorted({int(r["seed"]) for r in runs if isinstance(r.get("seed"), int)})
    if not seeds:
        return ""
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f" [seeds {seeds[0]}-{seeds[-1]}]"
    return f" [seeds {', '.join(map(str, seeds))}]"


def _pooled_runs(studies: list[Any], study: dict[str, Any], arm: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs a row is judged on: the arm's, and those of the studies it pools (``same_recipe_as``)."""
    dates = {str(d) for d in study.get("same_recipe_as") or []}
    runs = list(arm.get("runs") or [])
    for other in studies:
        if isinstance(other, dict) and other is not study and other.get("name") == study.get("name") \
                and _date(other) in dates and (o := _shipped_arm(other)) is not None:
            runs += o.get("runs") or []
    return [r for r in runs if isinstance(r, dict)]


def _cycle_pooled(studies: list[Any], study: dict[str, Any], arm: dict[str, Any]
                  ) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """A map-cycle study whose arm the file took (``shipped_arm``) is judged with every earlier study
    of its name that names the same arm as shipped (runs of the same settings): per-run counts join.
    Returns (summary, runs, the words naming the studies pooled)."""
    s = dict(arm.get("summary") or {})
    runs = list(arm.get("runs") or [])
    if not study.get("shipped_arm"):
        return s, runs, ""
    used = []
    for other in studies:
        if (not isinstance(other, dict) or other is study or other.get("name") != study.get("name")
                or other.get("shipped_arm") != study.get("shipped_arm") or _date(other) > _date(study)):
            continue
        o_arm = _shipped_arm(other)
        o = (o_arm or {}).get("summary") or {}
        if not o.get("map_cycle"):
            continue
        used.append(_date(other))
        runs = list(o_arm.get("runs") or []) + runs
        for key in ("best_beats_scripted", "best_gen_finished"):
            s[key] = list(o.get(key) or []) + list(s.get(key) or [])
        s["runs"] = int(s.get("runs", 0)) + int(o.get("runs", 0))
        s["diverged"] = int(s.get("diverged", 0)) + int(o.get("diverged", 0))
        s["gen"] = min(int(s.get("gen") or 0), int(o.get("gen") or 0)) or s.get("gen")
    if not used:
        return s, runs, ""
    return s, runs, f" (pooled: the runs of {', '.join(sorted(used))} and {_date(study)}, the arm the file took)"


def run_targets(path: Path, superseded: list[Row] | None = None) -> list[Row]:
    """The latest study of each name in ``RUN_TARGETS`` that ran the config as shipped (its
    ``as_shipped`` arm; a later study of other arms alone compares, it does not judge): in how many
    runs the best policy and the final weights beat the scripted driver on the run's track. A study
    from before its config took another arm's settings (``adoptions``) goes to ``superseded``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    adopted = adoptions(path)
    rows = _run_rows(data)
    out = []
    for row, study in rows:
        _sort(row, _replaced_by(adopted, str(study.get("config", "")), _date(study), study.get("shipped_arm")),
              out, superseded)
    return out


def _latest_judged(data: Any) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per study name with a goal, the latest study that ran the config as shipped and that arm."""
    latest: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # name -> (study, its as_shipped arm)
    for study in data.get("studies", []) if isinstance(data, dict) else []:
        name = str(study.get("name", "")) if isinstance(study, dict) else ""
        arm = _shipped_arm(study) if name in RUN_TARGETS or name in LONG_RUN_TARGETS else None
        if arm is not None and (name not in latest or _date(study) >= _date(latest[name][0])):
            latest[name] = (study, arm)
    return latest


def judged_runs(path: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]]:
    """Per study name with a goal: (the study its row reads, its shipped arm, every run the row judges:
    the arm's and those of the studies it pools). What the README's solver ratios are read from."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for name, (study, arm) in _latest_judged(data).items():
        if (arm.get("summary") or {}).get("map_cycle"):
            runs = _cycle_pooled(data["studies"], study, arm)[1]
        else:
            runs = _pooled_runs(data["studies"], study, arm)
        out[name] = (study, arm, runs)
    return out


def _run_rows(data: Any) -> list[tuple[Row, dict[str, Any]]]:
    """``run_targets``'s rows, each with the study it judges."""
    latest = _latest_judged(data)
    out: list[tuple[Row, dict[str, Any]]] = []
    for name, (study, arm) in latest.items():
        s = arm.get("summary") or {}
        if name in LONG_RUN_TARGETS:
            out.append((_long_target(study, arm, s, *LONG_RUN_TARGETS[name]), study))
            continue
        if s.get("map_cycle"):
            s, runs, pooled = _cycle_pooled(data["studies"], study, arm)
            row = _cycle_target(study, s, *RUN_TARGETS[name], runs=runs)
            out.append(((*row[:2], row[2] + pooled + _seeds(runs), *row[3:]), study))
            continue
        seeds = _seeds(_pooled_runs(data["studies"], study, arm))
        s, pooled = _pooled(data["studies"], study, s)
        runs_needed, best_needed, final_needed = RUN_TARGETS[name]
        made = f" ({int(s.get('runs', 0))} of {runs_needed} runs made)" if int(s.get("runs", 0)) < runs_needed else ""
        if study.get("target_return") is not None:
            runs, best, final = int(s.get("runs", 0)), int(s.get("best_reaches_target", 0)), int(s.get("final_reaches_target", 0))
            target = study["target_return"]
            goal = (f"`{study.get('config', '')}` run with `rulka run`: over {runs_needed} seeds the best policy reaches a "
                    f"greedy {target:g} in {best_needed}" + (f", the final weights in {final_needed}" if final_needed else ""))
            # judged by the environment's own bounds where the study recorded them (health_limits; before,
            # by the simulator's, which flag every healthy CartPole run: `python -m bench.study health` rejudges)
            bounds = ("" if study.get("health_limits") else
                      " (flags judged by the simulator's bounds; the study recorded no health_limits)")
            shown = (f"best {best}/{runs}, final {final}/{runs} seeds reach {target:g}, diverged "
                     f"{s.get('diverged', 0)}{bounds}" + made + pooled)
            goal += ", no divergence"
        else:
            runs, best, final = int(s.get("runs", 0)), int(s.get("best_beats_scripted", 0)), int(s.get("final_beats_scripted", 0))
            goal = (f"`{study.get('config', '')}` as the README runs it: over {runs_needed} runs the best policy beats the "
                    f"scripted driver in {best_needed}, the final weights in {final_needed}, no divergence")
            # runs that kept the moving average of their weights (trainer.average_policy_frames): shown,
            # never counted for the final weights
            averaged = (f" (averaged weights {int(s['average_beats_scripted'])}/{int(s.get('average_runs', runs))}"
                        + (" of the latest study)" if "average_runs" in s else ")")
                        if "average_beats_scripted" in s else "")
            # the in-run greedy races of the runs' last fifth: how often an end version beats the driver
            late = (f"; in-run races of the last fifth {int(s['late_beats_scripted'])}/{int(s['late_races'])}"
                    if s.get("late_races") else "")
            adopted = (f"; arm `{_shipped_name(study)}`, the settings the file took after these runs"
                       if study.get("shipped_arm") else "")
            shown = (f"best {best}/{runs}, final {final}/{runs}{averaged} runs on `{s.get('track', '')}`, "
                     f"diverged {s.get('diverged', 0)}" + made + late + pooled + adopted)
        # decided once the runs that are missing could no longer change the verdict; more runs than the
        # goal names are held to its shares (best in 5 of 5 runs: in every run of 7)
        missing = max(runs_needed - runs, 0)
        diverged = int(s.get("diverged", 0)) > 0  # every goal says no divergence (Gymnasium's by its own bounds)
        fails = (_short_of(best, best_needed, runs, runs_needed) or _short_of(final, final_needed, runs, runs_needed)
                 or diverged)
        holds: bool | None = False if fails else (True if missing == 0 else None)
        # a study that compared arms chose the one it shipped on these very seeds: it cannot also judge
        # it (issue 68); the row waits for a study of that arm alone on seeds drawn after the choice
        compared = [str(a.get("arm", "")) for a in study.get("arms") or [] if isinstance(a, dict)]
        if len(compared) > 1 and holds is not False:
            holds = None
            shown += (f"; not decided: chosen among {len(compared)} arms ({', '.join(compared)}) on these seeds, "
                      "which cannot also judge it: a study of that arm alone on fresh seeds decides")
        out.append((("`bench/study/runs.py`", goal, shown + seeds, _date(study), holds), study))
    return out


# the counts of an arm's summary that add up over studies of the same recipe
# (not the averaged weights': how they are kept may differ between such studies; they stay the latest's)
POOLED_COUNTS = ("runs", "best_beats_scripted", "final_beats_scripted", "late_races", "late_beats_scripted",
                 "best_reaches_target", "final_reaches_target", "diverged")


def _pooled(studies: list[Any], study: dict[str, Any], s: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A study that names earlier studies of its name as the same recipe (``same_recipe_as``: their
    dates; set when recording it, where nothing the runs' end weights depend on changed between them)
    is judged on the runs of all of them: their as-shipped arms' counts add up, held to the goal's
    shares. Returns the summary to judge and the words that say which studies it pools."""
    dates = [str(d) for d in study.get("same_recipe_as") or []]
    if not dates:
        return s, ""
    total = dict(s)
    used = []
    for other in studies:
        if (not isinstance(other, dict) or other is study or other.get("name") != study.get("name")
                or _date(other) not in dates):
            continue
        arm = _shipped_arm(other)  # its runs of the recipe that ships now (its shipped_arm, if it names one)
        if arm is None:
            continue
        used.append(_date(other))
        o = arm.get("summary") or {}
        for key in POOLED_COUNTS:
            if key in s or key in o:
                total[key] = int(total.get(key, 0)) + int(o.get(key, 0))
    if not used:
        return s, ""
    total["average_runs"] = int(s.get("runs", 0))
    return total, f" (pooled: the runs of {', '.join(sorted(used))} and {_date(study)}, the same recipe)"


def _long_target(study: dict[str, Any], arm: dict[str, Any], s: dict[str, Any], runs_needed: int,
                 no_slower_needed: int) -> tuple[str, str, str, str, bool | None]:
    """A longer run's row (issue 32: "run 4x longer, the final policy no slower than at 20 min"): the
    final weights' greedy race against the median of the run's own in-run greedy races over the last
    fifth of the frames it had made by ``--at-minutes``; a study that did not race that point is shown
    and not judged."""
    minutes = (study.get("budget") or {}).get("minutes")
    at = s.get("at_minutes")
    goal = (f"`{study.get('config', '')}` run longer ({_num(minutes) if minutes else '?'} minutes): in {no_slower_needed} "
            f"of {runs_needed} runs the final weights race no slower than the run did at "
            f"{_num(at) if at else 20} minutes, no divergence")
    if at is None:
        return ("`bench/study/runs.py`", goal, "not judged: the study did not race where the run stood then "
                "(`bench/study/runs.py --at-minutes`)", _date(study), None)
    track = s.get("track", "")
    parts = []
    for run in arm.get("runs", []):
        then = (run.get("at_minutes") or {}).get("tracks", {}).get(track)
        final = (run.get("final") or {}).get("tracks", {}).get(track) or {}
        if not then:
            continue
        now = f"{final['race_time_s']:.2f} s" if final.get("finished") else "not finished"
        was = f"{then['median_s']:.2f} s" if then.get("median_s") is not None else "no finish"
        parts.append(f"seed {run.get('seed', '?')}: final {now} after {_num(run.get('frames'))} frames, "
                     f"{was} at {_num(at)} min ({_num(run['at_minutes'].get('frames'))} frames, median of "
                     f"{then.get('races', 0)} races)")
    runs, got = int(s.get("at_minutes_runs", 0)), int(s.get("final_no_slower_than_at", 0))
    shown = "; ".join(parts) + f"; no slower in {got} of {runs}; diverged {s.get('diverged', 0)}"
    fails = _short_of(got, no_slower_needed, runs, runs_needed) or int(s.get("diverged", 0)) > 0
    holds: bool | None = False if fails else (True if runs >= runs_needed else None)
    return ("`bench/study/runs.py`", goal, shown, _date(study), holds)


def _tracks_lost(runs: Sequence[dict[str, Any]]) -> str:
    """Per run, the bundled tracks its best policy did not beat the scripted driver on, and by how
    much: ``seed 1: hairpins +2.15 s, default not finished``; empty when every run beat every one."""
    parts = []
    for run in runs:
        tracks = ((run.get("best") or {}).get("tracks") or {}).items()
        lost = []
        for track, race in tracks:
            if track.startswith("gen:") or not isinstance(race, dict) or race.get("beats_scripted"):
                continue
            t, ref = race.get("race_time_s"), race.get("scripted_s")
            lost.append(f"{track} +{t - ref:.2f} s" if race.get("finished") and t is not None and ref is not None
                        else f"{track} not finished")
        if lost:
            parts.append(f"seed {run.get('seed', '?')}: {', '.join(lost)}")
    return "; ".join(parts)


def _cycle_target(study: dict[str, Any], s: dict[str, Any], runs_needed: int, beaten_needed: int,
                  gen_needed: int, gen_of: int,
                  runs: Sequence[dict[str, Any]] = ()) -> tuple[str, str, str, str, bool | None]:
    """A map-cycle study's row: in every run the best policy beats the scripted driver on
    ``beaten_needed`` bundled tracks and finishes ``gen_needed`` of ``gen_of`` generated ones; the
    tracks a run's best policy lost are named with the seconds it lost them by."""
    beaten = [int(x or 0) for x in s.get("best_beats_scripted", [])]
    gen = [int(x or 0) for x in s.get("best_gen_finished", [])]
    lost = _tracks_lost(runs)
    n_runs = int(s.get("runs", 0))
    goal = (f"`{study.get('config', '')}` as a user runs it: in each of {runs_needed} runs the best policy beats the "
            f"scripted driver on {beaten_needed} of 5 bundled tracks and finishes at least {gen_needed} of {gen_of} "
            "generated tracks it never saw, no divergence")
    shown = (f"best beats {', '.join(map(str, beaten)) or '-'} of {s.get('bundled', 5)} bundled tracks, finishes "
             f"{', '.join(map(str, gen)) or '-'} of {s.get('gen', 0)} generated ones; diverged {s.get('diverged', 0)}"
             + (f" ({n_runs} of {runs_needed} runs made)" if n_runs < runs_needed else "")
             + (f"; lost: {lost}" if lost else "")
             + (f"; arm `{_shipped_name(study)}`, the settings the file took after these runs"
                if study.get("shipped_arm") else ""))
    # a generated count out of fewer tracks than the goal's is scaled up to it
    gen_share = [g * gen_of / s["gen"] if s.get("gen") else 0 for g in gen]
    fails = (any(b < beaten_needed for b in beaten) or any(g < gen_needed for g in gen_share)
             or int(s.get("diverged", 0)) > 0 or not s.get("gen"))
    holds: bool | None = False if fails else (True if n_runs >= runs_needed else None)
    return ("`bench/study/runs.py`", goal, shown, _date(study), holds)


def issue_goal_targets(path: Path) -> list[Row]:
    """The goals an issue study answered (``bench/history/issue_studies.json`` studies that carry
    ``goal``, ``measured`` and ``holds``: a study judged by its table, not by a script), one row each."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for study in data.get("studies", []) if isinstance(data, dict) else []:
        if isinstance(study, dict) and study.get("goal"):
            holds = study.get("holds")
            out.append(("`bench/history/issue_studies.json`", str(study["goal"]),
                        _short(str(study.get("measured", ""))), _date(study), holds if isinstance(holds, bool) else None))
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


def study_arms(path: Path) -> list[dict[str, Any]]:
    """The arms of the seed studies in ``bench/history/learner_fix_studies.json`` (``{"studies": [...]}``),
    one dict per arm: study, arm, date, command, frames (the budget), seeds, reached (per seed the
    env steps at which the greedy average first reached 475, None when it did not), best (per seed
    the best greedy average). A study holds either ``runs`` (``bench/learner_fix_studies.py``: one
    arm per ``objective``) or ``arms`` (``bench/study/recipe.py`` runs, each with its own runs); a study
    with neither (one recorded run with a ``result``) has no arms."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    studies = data.get("studies") if isinstance(data, dict) else None
    out: list[dict[str, Any]] = []
    for study in studies if isinstance(studies, list) else []:
        if not isinstance(study, dict):
            continue
        groups: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = []
        if isinstance(study.get("runs"), list):
            by_objective: dict[str, list[dict[str, Any]]] = {}
            for run in study["runs"]:
                if isinstance(run, dict):
                    by_objective.setdefault(str(run.get("objective", "")), []).append(run)
            groups = [(objective, study, runs) for objective, runs in by_objective.items()]
        elif isinstance(study.get("arms"), list):
            groups = [(str(arm.get("arm", "")), arm, [r for r in arm.get("runs", []) if isinstance(r, dict)])
                      for arm in study["arms"] if isinstance(arm, dict)]
        for arm, where, runs in groups:
            out.append({
                "study": str(study.get("name", "")), "arm": arm, "date": _date(where),
                "command": str(where.get("command", "")),
                "frames": where.get("frames_cap", where.get("frames")),
                "seeds": [r.get("seed") for r in runs],
                "reached": [r.get("reached_475_env_steps", r.get("reached_475_at_frames")) for r in runs],
                "best": [r.get("best_greedy") for r in runs],
            })
    return out


def study_targets(path: Path) -> list[tuple[str, str, str, str, bool | None]]:
    """Each learner-fix study arm: does the greedy average reach 475 in every seed within its budget."""
    out = []
    for arm in study_arms(path):
        reached = [r for r in arm["reached"] if isinstance(r, int | float)]
        shown = f"{len(reached)}/{len(arm['reached'])} seeds"
        if reached:
            shown += f" (at {', '.join(_num(r) for r in reached)} steps)"
        frames = arm["frames"]
        out.append(("`bench/history/learner_fix_studies.json`",
                    f"learner-fix comparison (issue 31) {arm['study']}, {arm['arm']}: greedy reaches 475 in each of "
                    f"{len(arm['reached'])} seeds, budget "
                    f"{_num(frames) if isinstance(frames, int | float) else '?'} frames (the last update "
                    "may pass it)",
                    shown, arm["date"], bool(arm["reached"]) and len(reached) == len(arm["reached"])))
    return out
