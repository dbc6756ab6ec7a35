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


def flatten(obj: Any, prefix: str = "", columns: bool = False) -> list[tuple[str, Any]]:
    """Nested dicts/lists -> ``[("a.b", value), ...]`` in their original order. ``columns``: a list of
    at least ``COLUMN_MIN`` records with the same keys and plain values (one per weights version,
    say) gives one row per key, ``("a[].key", [its values])``, instead of one per record and key."""
    if isinstance(obj, dict):
        rows: list[tuple[str, Any]] = []
        for key, value in obj.items():
            rows += flatten(value, f"{prefix}.{key}" if prefix else str(key), columns)
        return rows
    if isinstance(obj, list) and any(isinstance(v, dict | list) for v in obj):
        if columns and _records(obj):
            return [(f"{prefix}[].{key}", [record[key] for record in obj]) for key in obj[0]]
        rows = []
        for i, value in enumerate(obj):
            rows += flatten(value, f"{prefix}[{i}]", columns)
        return rows
    return [(prefix, obj)]


COLUMN_MIN = 4


def _records(items: list[Any]) -> bool:
    """Whether ``items`` are at least ``COLUMN_MIN`` dicts with the same keys and no nested values."""
    if len(items) < COLUMN_MIN or not all(isinstance(v, dict) for v in items):
        return False
    keys = list(items[0])
    return all(list(v) == keys and not any(isinstance(x, dict | list) for x in v.values()) for v in items)


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
