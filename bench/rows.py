"""The pieces every targets row is made of (``bench.targets`` for the benchmarks' and the extended
learning tests' rows, ``bench.study_targets`` for the seed and issue studies'): the row type, number
and text formatting, and reading a history file's records. Only reads and formats."""

from __future__ import annotations

import json
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


def _sort(row: Row, gone: str | None, out: list[Row], superseded: list[Row] | None) -> None:
    """``row`` into ``out``, or, when ``gone`` says why it is superseded, into ``superseded`` with why."""
    if not gone:
        out.append(row)
    elif superseded is not None:
        superseded.append((*row[:2], f"{gone}; {row[2]}", *row[3:]))


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
