"""MetricsLogger: one call, three sinks (JSON lines, TensorBoard, wandb).

The JSON-lines log (``<run_dir>/metrics.jsonl``) is always written and needs nothing installed;
``rulka plot`` draws from it. TensorBoard and wandb are optional. A sink that raises is
disabled with one warning: logging never stops training.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import string
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rulka.config import ConfigLike

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
WANDB_ID_FILE = "wandb_run_id.txt"
WANDB_MODES = ("online", "offline", "disabled")


def _to_float(value: Any) -> float:
    # accepts python numbers, numpy scalars and 0-d/1-element torch tensors without importing either
    if hasattr(value, "item"):
        value = value.item()
    return float(value)


def _json_number(value: float) -> float | None:
    # strict JSON has no NaN/inf: write null so any JSON reader accepts the file
    return value if math.isfinite(value) else None


def staircase_suffix(schedule: Sequence[Sequence[Any]] | None, frames: float) -> str:
    """The TensorBoard folder suffix for ``frames`` under the guide's
    ``tensorboard_suffix_schedule`` (``[(0, ""), (6_000_000, "_2"), ...]``): the suffix of the
    last knot at or below ``frames``; ``""`` before the first knot or without a schedule."""
    suffix = ""
    for knot in sorted(schedule or (), key=lambda k: float(k[0])):
        if frames >= float(knot[0]):
            suffix = str(knot[1])
    return suffix


class _Sink:
    name = "sink"

    def write(self, metrics: Mapping[str, float], step: int, wall_time: float) -> None:
        raise NotImplementedError

    def write_text(self, name: str, text: str, step: int, wall_time: float) -> None:  # noqa: B027
        pass

    def write_resume_marker(self, step: int, wall_time: float) -> None:  # noqa: B027
        pass

    def flush(self) -> None:  # noqa: B027
        pass

    def close(self) -> None:  # noqa: B027
        pass


class JsonlSink(_Sink):
    """``{"step": int, "wall_time": unix_s, "metrics": {name: number|null}}`` per line;
    text entries use ``"text"`` instead of ``"metrics"``."""

    name = "jsonl"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # append: a resumed run continues the same file (read_metrics drops superseded steps)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.path = path
        if self._file.tell() > 0:
            with open(path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    # a crash tore the last line: start ours on a fresh one so it stays readable
                    self._file.write("\n")

    def _line(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        self._file.flush()  # a crash must not lose the curve; one write per logging interval is cheap

    def write(self, metrics: Mapping[str, float], step: int, wall_time: float) -> None:
        self._line({"step": step, "wall_time": wall_time,
                    "metrics": {k: _json_number(v) for k, v in metrics.items()}})

    def write_text(self, name: str, text: str, step: int, wall_time: float) -> None:
        self._line({"step": step, "wall_time": wall_time, "text": {name: text}})

    def write_resume_marker(self, step: int, wall_time: float) -> None:
        self._line({"resumed_at": step, "wall_time": wall_time})

    def close(self) -> None:
        self._file.close()


class TensorBoardSink(_Sink):
    """Event files in ``<run_dir>/tensorboard<suffix>``; the suffix follows the frame schedule."""

    name = "tensorboard"

    def __init__(self, run_dir: Path, suffix: str = "", schedule: Sequence[Sequence[Any]] | None = None,
                 purge_step: int | None = None, suffix_fn: Callable[[int], str] | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # lazy: torch import is slow

        self._writer_cls = SummaryWriter
        self.run_dir = run_dir
        self.base_suffix = suffix
        self.schedule = schedule
        self.suffix_fn = suffix_fn
        self._purge_step = purge_step
        self.suffix: str | None = None
        self._writer: Any = None

    def _writer_for(self, step: int) -> Any:
        if self.suffix_fn is not None:
            suffix = self.base_suffix + self.suffix_fn(step)
        elif self.schedule:
            suffix = self.base_suffix + staircase_suffix(self.schedule, step)
        else:
            suffix = self.base_suffix
        if suffix != self.suffix:
            if self._writer is not None:
                self._writer.close()
            self.suffix = suffix
            self._writer = self._writer_cls(
                log_dir=str(self.run_dir / f"tensorboard{suffix}"), purge_step=self._purge_step, flush_secs=30
            )
            self._purge_step = None  # only the folder open at resume time drops stale events
        return self._writer

    def write(self, metrics: Mapping[str, float], step: int, wall_time: float) -> None:
        writer = self._writer_for(step)
        for name, value in metrics.items():
            writer.add_scalar(name, value, global_step=step, walltime=wall_time)

    def write_text(self, name: str, text: str, step: int, wall_time: float) -> None:
        self._writer_for(step).add_text(name, text, global_step=step, walltime=wall_time)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _new_wandb_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(10))


class WandbSink(_Sink):
    """A wandb run, resumable: its id is kept in ``<run_dir>/wandb_run_id.txt``.

    Offline runs land in ``<run_dir>/wandb`` (or ``$WANDB_DIR``); upload later with
    ``wandb sync <run_dir>/wandb/offline-run-*``. Entity and project come from the arguments,
    else from ``WANDB_ENTITY``/``WANDB_PROJECT`` (e.g. set in ``.env``). The API key is read by
    wandb itself (``wandb login`` or ``WANDB_API_KEY``) and never stored by rulka.
    """

    name = "wandb"

    def __init__(self, run_dir: Path, run_name: str, *, mode: str = "offline", project: str | None = None,
                 entity: str | None = None, config: Mapping[str, Any] | None = None, resume: bool = False) -> None:
        import wandb  # lazy: only when enabled

        id_file = run_dir / WANDB_ID_FILE
        run_id = id_file.read_text(encoding="utf-8").strip() if resume and id_file.exists() else ""
        if not run_id:
            run_id = _new_wandb_id()
            run_dir.mkdir(parents=True, exist_ok=True)
            id_file.write_text(run_id + "\n", encoding="utf-8")
        self.run_id = run_id
        self._run = wandb.init(
            project=project or os.environ.get("WANDB_PROJECT") or "rulka",
            entity=entity or os.environ.get("WANDB_ENTITY") or None,
            name=run_name,
            id=run_id,
            resume="allow",
            mode=mode,
            dir=os.environ.get("WANDB_DIR") or str(run_dir),
            config=dict(config) if config else None,
            reinit="create_new",  # several loggers in one process (one-process mode) must not collide
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )
        self.run_path = Path(self._run.dir).parent  # .../offline-run-<date>-<id> or run-<date>-<id>
        # charts use our step (frames) as x axis; wandb's own step restarts meaningfully on resume
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")

    def write(self, metrics: Mapping[str, float], step: int, wall_time: float) -> None:
        # our step (frames) is not wandb's monotonically increasing internal step on resume; log it
        # as a metric and let the user choose it as the x axis
        self._run.log({**metrics, "step": step}, commit=True)

    def write_text(self, name: str, text: str, step: int, wall_time: float) -> None:
        self._run.summary[name] = text

    def close(self) -> None:
        self._run.finish()


class MetricsLogger:
    """Logs namespaced metrics (``charts/...``, ``losses/...``, ``perf/...``) against a step.

    ``step`` is the run's x axis, normally frames (environment steps) collected so far.

    Args:
        run_dir: the run folder; created if missing.
        run_name: shown in wandb and TensorBoard.
        config: the resolved run config, stored with the wandb run.
        wandb: ``{"enabled": bool, "mode": "online"|"offline"|"disabled", "project", "entity"}``;
            None or disabled means no wandb (and no wandb import).
        tensorboard: write TensorBoard event files.
        tb_suffix: a fixed suffix for the TensorBoard folder (``tensorboard<suffix>``).
        tb_suffix_schedule: the guide's staircase ``[(frames, suffix), ...]``: a new TensorBoard
            folder when ``step`` passes each knot.
        tb_suffix_fn: ``step -> suffix`` instead of ``tb_suffix_schedule`` (the config's
            ``tensorboard_suffix_at``, which applies ``global_schedule_speed``).
        resume: continue an earlier run in ``run_dir`` (same wandb run, JSONL appended,
            TensorBoard events after the first logged step discarded).
    """

    def __init__(self, run_dir: str | Path, *, run_name: str, config: Mapping[str, Any] | None = None,
                 wandb: Mapping[str, Any] | None = None, tensorboard: bool = True, tb_suffix: str = "",
                 tb_suffix_schedule: Sequence[Sequence[Any]] | None = None,
                 tb_suffix_fn: Callable[[int], str] | None = None, resume: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.run_name = run_name
        self.resume = resume
        self._sinks: list[_Sink] = [JsonlSink(self.run_dir / METRICS_FILE)]
        self._tb_args: dict[str, Any] | None = None
        if tensorboard:
            self._tb_args = {"suffix": tb_suffix, "schedule": tb_suffix_schedule, "suffix_fn": tb_suffix_fn}
        self._tb_pending = tensorboard
        self._closed = False
        self._logged = False
        self._lock = threading.RLock()  # ingest and training threads may both log
        self.dropped_values = 0  # values that were not numbers
        self.wandb_sink: WandbSink | None = None
        wandb_cfg = dict(wandb or {})
        mode = str(wandb_cfg.get("mode", "offline"))
        if mode not in WANDB_MODES:
            raise ValueError(f"wandb mode must be one of {', '.join(WANDB_MODES)}, not {mode!r}")
        if wandb_cfg.get("enabled", bool(wandb_cfg)) and mode != "disabled":
            try:
                self.wandb_sink = WandbSink(
                    self.run_dir, run_name, mode=mode, project=wandb_cfg.get("project"),
                    entity=wandb_cfg.get("entity"), config=config, resume=resume,
                )
                self._sinks.append(self.wandb_sink)
            except Exception as exc:  # noqa: BLE001 - a dashboard must never stop training
                log.warning("wandb disabled: %s: %s", type(exc).__name__, exc)

    @property
    def sinks(self) -> list[str]:
        """Names of the sinks still active (``jsonl`` first)."""
        names = [s.name for s in self._sinks]
        if self._tb_pending:
            names.insert(1, "tensorboard")
        return names

    def _open_tensorboard(self, first_step: int) -> None:
        # opened at the first log so a resumed run can purge events newer than where it resumed
        self._tb_pending = False
        assert self._tb_args is not None
        try:
            sink = TensorBoardSink(self.run_dir, purge_step=first_step if self.resume else None, **self._tb_args)
            self._sinks.insert(1, sink)
        except Exception as exc:  # noqa: BLE001
            log.warning("tensorboard disabled: %s: %s", type(exc).__name__, exc)

    def _first_log(self, step: int) -> None:
        if self._logged:
            return
        self._logged = True
        if self.resume:
            # tells read_metrics that records at or after this step from the interrupted attempt
            # are superseded
            self._each_sink("write_resume_marker", step, time.time())
        if self._tb_pending:
            self._open_tensorboard(step)

    def _each_sink(self, method: str, *args: Any) -> None:
        for sink in list(self._sinks):
            try:
                getattr(sink, method)(*args)
            except Exception as exc:  # noqa: BLE001 - disable this sink, keep the others
                log.warning("%s logging disabled after an error: %s: %s", sink.name, type(exc).__name__, exc)
                self._sinks.remove(sink)
                try:
                    sink.close()
                except Exception:  # noqa: BLE001, S110 - already broken
                    pass

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record ``metrics`` (name -> number) at ``step``. Non-numbers are skipped and counted."""
        if self._closed:
            return
        values: dict[str, float] = {}
        for name, value in metrics.items():
            try:
                values[str(name)] = _to_float(value)
            except (TypeError, ValueError):
                self.dropped_values += 1
                if self.dropped_values == 1:
                    log.warning("metric %r is not a number (%r); skipped (further ones counted silently)",
                                name, value)
        if not values:
            return
        with self._lock:
            if self._closed:
                return
            self._first_log(int(step))
            self._each_sink("write", values, int(step), time.time())

    def log_text(self, name: str, text: str, step: int) -> None:
        """Record a short text (e.g. the run's command line, a warning worth keeping)."""
        if self._closed:
            return
        with self._lock:
            if self._closed:
                return
            self._first_log(int(step))
            self._each_sink("write_text", name, str(text), int(step), time.time())

    def flush(self) -> None:
        with self._lock:
            self._each_sink("flush")

    def close(self) -> None:
        """Flush and close every sink (finishes the wandb run). Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sinks, self._sinks = self._sinks, []
        for sink in sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("%s did not close cleanly: %s", sink.name, exc)

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def from_config(cfg: ConfigLike, run_dir: str | Path, resume: bool = False, *,
                run_name: str | None = None) -> MetricsLogger:
    """A MetricsLogger set up from the run config (``rulka.config.as_config``): the
    ``logging.wandb`` and ``logging.tensorboard`` sections, and the TensorBoard folder suffix
    from ``training.tensorboard_suffix_schedule`` (through ``cfg.tensorboard_suffix_at``, so
    ``global_schedule_speed`` applies); the whole config goes with the wandb run.
    """
    from rulka.config import as_config

    cfg = as_config(cfg)
    wandb_cfg = cfg.logging.wandb
    wandb = {"enabled": wandb_cfg.enabled, "mode": wandb_cfg.mode, "project": wandb_cfg.project}
    if wandb_cfg.entity is not None:
        wandb["entity"] = wandb_cfg.entity
    run_dir = Path(run_dir)
    return MetricsLogger(
        run_dir, run_name=run_name or run_dir.resolve().name, config=cfg.to_dict(), wandb=wandb,
        tensorboard=cfg.logging.tensorboard.enabled, tb_suffix_fn=lambda step: str(cfg.tensorboard_suffix_at(step)),
        resume=resume,
    )


def read_metrics(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the metric records of a ``metrics.jsonl`` (a file or its run folder), oldest first.

    Lines that are not valid records (a torn last line after a crash) are skipped. Where a
    resumed run restarted from step S, earlier records at step S or later are dropped: they
    belong to the attempt that was rolled back to the checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    records: list[dict[str, Any]] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            resumed_at = record.get("resumed_at")
            if isinstance(resumed_at, int | float):
                records = [r for r in records if r["step"] < resumed_at]
                continue
            step = record.get("step")
            if not isinstance(record.get("metrics"), dict) or not isinstance(step, int | float):
                continue
            records.append(record)
    yield from records
