"""``rulka status --server HOST:PORT --keys DIR``: who is connected, and is the run alive?

Exit code 0 when the trainer and at least one worker reported recently, 1 otherwise (so scripts
and cron jobs can alert on it), 2 on a usage error or an unreachable server.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rulka.errors import UserError
from rulka.telemetry.progress import format_value

EXIT_OK = 0
EXIT_DEGRADED = 1

QueryFn = Callable[[str, int, Path, float], Mapping[str, Any]]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show the workers and trainer connected to a rulka-server",
        description=(
            "Ask a rulka-server which workers and which trainer are connected and print a table "
            "(name, address, episodes, samples/s, weights version, versions behind, last seen). Exits 0 when the "
            "trainer and at least one worker reported within --stale-s seconds, 1 when the trainer "
            "or every worker is gone, 2 when the server cannot be reached."
        ),
    )
    parser.add_argument("--server", required=True, metavar="HOST:PORT", help="the rulka-server to ask")
    parser.add_argument("--keys", required=True, type=Path, metavar="DIR",
                        help="credentials: the trainer's keys folder (from `rulka keys generate`; a worker bundle is refused)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="run config for network settings other than host/port (TLS, chunk size)")
    parser.add_argument("--json", action="store_true", help="print the raw report as JSON instead of a table")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds to wait for the server's answer (default 10)")
    parser.add_argument("--stale-s", type=float, default=30.0, metavar="S",
                        help="a role silent for longer than this counts as gone (default 30)")
    parser.set_defaults(func=main)


def parse_server(text: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[::1]:port"``) -> ``(host, port)``; UserError when malformed."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UserError(f"--server must look like HOST:PORT (e.g. 192.168.1.20:55555), not {text!r}")
    return host, int(port_text)


def _connected(report: Mapping[str, Any], name: str) -> bool | None:
    """What the server says about ``name``'s connection (None when it does not say)."""
    server = report.get("server") or {}
    if name == "trainer" and isinstance(server.get("trainer_connected"), bool):
        return bool(server["trainer_connected"])
    clients = server.get("clients")
    client = clients.get(name) if isinstance(clients, Mapping) else None
    if isinstance(client, Mapping) and isinstance(client.get("connected"), bool):
        return bool(client["connected"])
    return None


def _alive(row: Mapping[str, Any] | None, stale_s: float, connected: bool | None = None) -> bool:
    if not row or connected is False:
        return False
    last_seen = row.get("last_seen_s")
    return isinstance(last_seen, int | float) and last_seen <= stale_s


def exit_code(report: Mapping[str, Any], stale_s: float) -> tuple[int, str]:
    """``(code, reason)``: 1 with a reason when the trainer or every worker is gone (silent for
    over ``stale_s`` seconds, or disconnected according to the server)."""
    trainer = report.get("trainer")
    if not trainer:
        return EXIT_DEGRADED, "the trainer is not connected"
    if not _alive(trainer, stale_s, _connected(report, "trainer")):
        if _connected(report, "trainer") is False:
            return EXIT_DEGRADED, "the trainer has disconnected"
        return EXIT_DEGRADED, f"the trainer has been silent for over {stale_s:g} s"
    workers = report.get("workers") or []
    if not workers:
        return EXIT_DEGRADED, "no worker is connected"
    if not any(_alive(w, stale_s, _connected(report, str(w.get("name")))) for w in workers):
        return EXIT_DEGRADED, f"every worker has disconnected or been silent for over {stale_s:g} s"
    return EXIT_OK, ""


def _server_line(server: Mapping[str, Any]) -> str:
    parts = []
    for key, value in server.items():
        if key == "clients":
            continue  # shown per row
        if isinstance(value, Mapping):  # e.g. bad_inputs: reason -> count
            value = sum(v for v in value.values() if isinstance(v, int | float))
        elif isinstance(value, list | tuple):
            value = len(value)
        if key.endswith("_s") and isinstance(value, int | float):
            parts.append(f"{key[:-2].replace('_', ' ')} {format_value(value)}s")
        else:
            parts.append(f"{key.replace('_', ' ')} {format_value(value)}")
    return "server   " + "  ".join(parts)


def _seconds(value: Any) -> str:
    return f"{value:.1f}s ago" if isinstance(value, int | float) else "-"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [header, *rows]]


def _behind(worker: Mapping[str, Any]) -> str:
    """Newer weights versions the relay has and has not finished sending to this worker, and for how
    long ("-": not reported): a growing figure means the relay's uplink is the limit."""
    n, age = worker.get("weights_behind"), worker.get("weights_behind_s")
    if not isinstance(n, int):
        return "-"
    if n == 0:
        return "0"
    return f"{n} ({age:.0f} s)" if isinstance(age, int | float) else str(n)


def format_status(report: Mapping[str, Any], stale_s: float = 30.0) -> str:
    """The human-readable status: server line, trainer line, then one row per worker."""
    lines = []
    server = report.get("server") or {}
    if server:
        lines.append(_server_line(server))
    trainer = report.get("trainer")
    if trainer:
        state = "" if _alive(trainer, stale_s, _connected(report, "trainer")) else "  (GONE)"
        known = ("weights_version", "updates", "samples", "memory_size", "updates_per_s")
        parts = [f"{k.replace('_', ' ')} {format_value(trainer[k])}" for k in known if k in trainer]
        lines.append("trainer  " + "  ".join(parts) + f"  last seen {_seconds(trainer.get('last_seen_s'))}{state}")
    else:
        lines.append("trainer  not connected")
    workers = sorted(report.get("workers") or [], key=lambda w: str(w.get("name")))
    if workers:
        header = ["WORKER", "ADDRESS", "EPISODES", "SAMPLES/S", "VERSION", "BEHIND", "LAST SEEN", ""]
        rows = [[
            str(w.get("name", "?")), str(w.get("address") or "-"), format_value(w.get("episodes")),
            format_value(w.get("samples_per_s")), format_value(w.get("weights_version")), _behind(w),
            _seconds(w.get("last_seen_s")),
            "" if _alive(w, stale_s, _connected(report, str(w.get("name")))) else "GONE",
        ] for w in workers]
        lines.append("")
        lines.extend(_table(header, rows))
    else:
        lines.append("workers  none connected")
    return "\n".join(lines)


def _network_section(config: Path | None) -> dict[str, Any]:
    """The config file's ``network`` section under the transport's names (empty: the defaults)."""
    if config is None:
        return {}
    from rulka.config import load_config

    return load_config(config).network.transport_settings()


def _query_server(host: str, port: int, keys: Path, timeout: float, config: Path | None = None) -> Mapping[str, Any]:
    try:
        from rulka.net.status import query_status
    except ImportError as exc:
        raise UserError(f"this rulka build cannot query servers ({exc})") from exc
    # the command line's host and port win over the config file's
    network = {**_network_section(config), "host": host, "port": port}  # "host" wins over server_host
    return query_status(network, keys, timeout)


def run_status(args: argparse.Namespace, query: QueryFn | None = None, out: Any = None) -> int:
    """Body of ``rulka status``; ``query(host, port, keys, timeout)`` is replaceable for tests."""
    out = out if out is not None else sys.stdout
    host, port = parse_server(args.server)
    if not args.keys.is_dir():
        raise UserError(f"credentials folder {args.keys} does not exist; create one with `rulka keys`")
    if query is None:
        report = _query_server(host, port, args.keys, args.timeout, args.config)
    else:
        report = query(host, port, args.keys, args.timeout)
    code, reason = exit_code(report, args.stale_s)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str), file=out)
    else:
        print(format_status(report, args.stale_s), file=out)
    if reason:
        print(f"rulka status: {reason}", file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    return run_status(args)
