"""Learning-curve PNGs from a run's local ``metrics.jsonl`` (no wandb account needed)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rulka.errors import UserError
from rulka.telemetry import metrics as m
from rulka.telemetry.logger import METRICS_FILE, read_metrics
from rulka.telemetry.metrics import split_scoped

OVERALL = "all maps"

Series = dict[str, list[tuple[float, float, float]]]  # name -> [(step, wall_time, value)]


def load_series(run_dir: str | Path) -> Series:
    """Every numeric metric of the run as ``name -> [(step, wall_time, value)]``, sorted by step."""
    path = Path(run_dir)
    log_file = path / METRICS_FILE if path.is_dir() else path
    if not log_file.is_file():
        raise UserError(f"no metrics log at {log_file}; pass a run folder (it holds {METRICS_FILE})")
    series: Series = {}
    for record in read_metrics(log_file):
        wall_time = float(record.get("wall_time") or 0.0)
        for name, value in record["metrics"].items():
            if isinstance(value, int | float) and math.isfinite(value):
                series.setdefault(name, []).append((float(record["step"]), wall_time, float(value)))
    for points in series.values():
        points.sort(key=lambda p: p[0])
    return series


def _bundled_reference_ms(map_name: str) -> float | None:
    """The reference time of a track bundled with rulka's simulator, if ``map_name`` is one."""
    try:
        from rulka.envs.sim.tracks import bundled_track_names, load_track_spec

        # bundled names only: a map name read from a log never becomes a file path
        if map_name not in bundled_track_names():
            return None
        value = load_track_spec(map_name).get("reference_time_ms")
    except Exception:  # noqa: BLE001 - the simulator is optional for plotting
        return None
    return float(value) if isinstance(value, int | float) else None


def run_track(run_dir: Path) -> str | None:
    """The simulator track a run drove, from its ``config.resolved.yaml`` (None for other envs)."""
    path = run_dir / "config.resolved.yaml"
    try:
        import yaml

        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)  # plain data only, never objects
    except Exception:  # noqa: BLE001 - missing or damaged file (OSError, YAMLError): no reference line
        return None
    env = doc.get("environment") if isinstance(doc, dict) else None
    if not isinstance(env, dict) or env.get("backend", "sim") != "sim":
        return None
    track = env.get("track")
    return track if isinstance(track, str) else None


def reference_times(series: Series, maps: list[str],
                    lookup: Callable[[str], float | None] = _bundled_reference_ms) -> dict[str, float]:
    """Reference time (ms) per map: logged ``charts/<map>/reference_time_ms`` first, else the
    bundled track's; the overall panel uses ``charts/reference_time_ms`` when logged."""
    out: dict[str, float] = {}
    for map_name in maps:
        name = m.REFERENCE_TIME_MS if map_name == OVERALL else m.per_map(m.REFERENCE_TIME_MS, map_name)
        if series.get(name):
            out[map_name] = series[name][-1][2]
        elif map_name != OVERALL:
            found = lookup(map_name)
            if found is not None:
                out[map_name] = found
    return out


def _maps(series: Series) -> list[str]:
    maps = {scope for scope, base in (split_scoped(n) for n in series)
            if scope is not None and base in (m.EPISODIC_RETURN, m.RACE_TIME_MS, m.EVAL_RETURN, m.EVAL_RACE_TIME_MS)}
    overall = [OVERALL] if (m.EPISODIC_RETURN in series or m.RACE_TIME_MS in series) else []
    return overall + sorted(maps)


def _smooth(values: list[float]) -> list[float]:
    # trailing mean over ~5% of the points: shows the trend without hiding the spread
    window = max(1, len(values) // 20)
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _draw(ax: Any, points: list[tuple[float, float, float]], x_index: int, x0: float, x_scale: float,
          scale: float, label: str, color: str = "tab:blue") -> None:
    xs = [(p[x_index] - x0) / x_scale for p in points]
    ys = [p[2] * scale for p in points]
    ax.plot(xs, ys, ".", alpha=0.3, markersize=3, color=color)
    ax.plot(xs, _smooth(ys), "-", color=color, label=label)


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "map"


def _save(fig: Any, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=100)


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None,
             reference_ms: Mapping[str, float] | None = None) -> list[Path]:
    """Write PNGs for a run and return their paths.

    Per map (and ``all maps``): episodic return and race time against frames and against wall
    time, with the track's reference time as a dashed line; greedy test episodes (``eval/...``,
    ``trainer.eval_every_versions``) in orange beside the exploring ones. Plus ``training.png`` with losses,
    the other run-wide charts (Q statistics, learning rate, epsilon...) and throughput, up to 12
    panels. ``out_dir`` defaults to
    ``<run_dir>/plots``. Raises UserError when there is nothing to draw.
    """
    from matplotlib.figure import Figure  # lazy, and no global backend switch

    run_dir = Path(run_dir)
    series = load_series(run_dir)
    if not series:
        raise UserError(f"{run_dir / METRICS_FILE} holds no metrics yet; let the run log for a while")
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    every = [p for points in series.values() for p in points]
    wall0 = min(p[1] for p in every)
    span_s = max(p[1] for p in every) - wall0
    wall_scale, wall_unit = (3600.0, "hours") if span_s > 3 * 3600 else (60.0, "minutes")
    maps = _maps(series)
    refs = dict(reference_times(series, maps))
    track = run_track(run_dir)
    if track and OVERALL not in refs and [mp for mp in maps if mp != OVERALL] in ([], [track]):
        # a single-track simulator run: its overall curve is that track's
        found = _bundled_reference_ms(track)
        if found is not None:
            refs[OVERALL] = found
    refs.update(reference_ms or {})
    written: list[Path] = []
    for map_name in maps:
        def name_of(base: str, map_name: str = map_name) -> str:
            return base if map_name == OVERALL else m.per_map(base, map_name)

        fig = Figure(figsize=(11, 7))
        axes = fig.subplots(2, 2)
        rows = [(m.EPISODIC_RETURN, m.EVAL_RETURN, "episodic return", 1.0),
                (m.RACE_TIME_MS, m.EVAL_RACE_TIME_MS, "race time (s)", 1e-3)]
        for row, (base, eval_base, ylabel, scale) in enumerate(rows):
            points = series.get(name_of(base), [])
            greedy = series.get(name_of(eval_base), [])
            for col, (x_index, x0, x_scale, xlabel) in enumerate(
                [(0, 0.0, 1.0, "frames"), (1, wall0, wall_scale, f"wall time ({wall_unit})")]
            ):
                ax = axes[row][col]
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                ax.grid(alpha=0.3)
                if not points and not greedy:
                    ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
                    continue
                if points:
                    _draw(ax, points, x_index, x0, x_scale, scale, "exploring" if greedy else ylabel)
                if greedy:
                    _draw(ax, greedy, x_index, x0, x_scale, scale, "greedy (eval/)", color="tab:orange")
                    ax.legend(loc="best", fontsize=8)
                if base == m.RACE_TIME_MS and map_name in refs:
                    ax.axhline(refs[map_name] * scale, color="tab:red", linestyle="--",
                               label=f"reference {refs[map_name] / 1000:.2f} s")
                    ax.legend(loc="best", fontsize=8)
        fig.suptitle(f"{run_dir.resolve().name}: {map_name}")
        fig.tight_layout()
        path = out / f"{_safe_name(map_name.replace(' ', '_'))}.png"
        _save(fig, path)
        written.append(path)

    on_map_figures = {m.EPISODIC_RETURN, m.RACE_TIME_MS, m.FINISH_RATE, m.REFERENCE_TIME_MS, m.EPISODES}
    # losses, then the unscoped charts (Q statistics, learning rate, epsilon ...), then key perf rates
    training = sorted(n for n in series if n.startswith("losses/"))
    training += sorted(n for n in series if n.startswith("charts/") and n.count("/") == 1 and n not in on_map_figures)
    training += [n for n in (m.BATCHES_PER_S, m.SAMPLES_PER_S, m.POLICY_LAG_AVG) if n in series]
    if training:
        training = training[:12]
        cols = min(3, len(training))
        rows_n = math.ceil(len(training) / cols)
        fig = Figure(figsize=(4 * cols, 3 * rows_n))
        axes = fig.subplots(rows_n, cols, squeeze=False)
        for ax, name in zip([a for row in axes for a in row], training):
            _draw(ax, series[name], 0, 0.0, 1.0, 1.0, name)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("frames")
            ax.grid(alpha=0.3)
        for ax in [a for row in axes for a in row][len(training):]:
            ax.set_visible(False)
        fig.tight_layout()
        path = out / "training.png"
        _save(fig, path)
        written.append(path)
    if not written:
        raise UserError(f"{run_dir / METRICS_FILE} has no return, race time or loss metrics to plot")
    return written
