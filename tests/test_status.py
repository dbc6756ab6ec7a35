"""`rulka status`: the table, the JSON report and the exit codes scripts rely on."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from rulka.cli import build_parser, main
from rulka.cli.status import exit_code, format_status, parse_server, run_status
from rulka.errors import UserError


def _report(trainer_seen: float | None = 1.0, worker_seen: tuple[float, ...] = (0.5, 2.0)) -> dict[str, Any]:
    workers = [
        {"name": f"pc{i + 1}", "address": f"192.168.1.{10 + i}:50{i}00", "episodes": 120 * (i + 1),
         "samples_per_s": 512.25, "weights_version": 7 - i, "last_seen_s": seen,
         "weights_behind": i, "weights_behind_s": 42.4 * i}
        for i, seen in enumerate(worker_seen)
    ]
    trainer = None if trainer_seen is None else {
        "weights_version": 7, "updates": 34_000, "samples": 1_200_000, "last_seen_s": trainer_seen}
    return {"server": {"uptime_s": 12.0, "workers_connected": [w["name"] for w in workers]},
            "trainer": trainer, "workers": workers}


def _args(tmp_path: Path, *extra: str) -> Any:
    return build_parser().parse_args(["status", "--server", "127.0.0.1:55555", "--keys", str(tmp_path), *extra])


def test_table_lists_workers_and_trainer(tmp_path: Path) -> None:
    out = io.StringIO()
    calls = []

    def query(host: str, port: int, keys: Path, timeout: float) -> dict[str, Any]:
        calls.append((host, port, keys, timeout))
        return _report()

    assert run_status(_args(tmp_path, "--timeout", "3"), query=query, out=out) == 0
    assert calls == [("127.0.0.1", 55555, tmp_path, 3.0)]
    lines = out.getvalue().splitlines()
    assert lines[0] == "server   uptime 12s  workers connected 2"
    assert lines[1] == "trainer  weights version 7  updates 34,000  samples 1,200,000  last seen 1.0s ago"
    header = lines[3].split()
    assert header == ["WORKER", "ADDRESS", "EPISODES", "SAMPLES/S", "VERSION", "BEHIND", "LAST", "SEEN"]
    assert lines[4].split() == ["pc1", "192.168.1.10:50000", "120", "512.2", "7", "0", "0.5s", "ago"]
    # the relay has 1 newer version it has not finished sending pc2, complete there for 42 s
    assert lines[5].split() == ["pc2", "192.168.1.11:50100", "240", "512.2", "6", "1", "(42", "s)", "2.0s", "ago"]


@pytest.mark.parametrize(
    ("trainer_seen", "worker_seen", "expected", "reason"),
    [
        (1.0, (0.5, 2.0), 0, ""),
        (1.0, (0.5, 99.0), 0, ""),  # one worker alive is enough
        (None, (0.5,), 1, "the trainer is not connected"),
        (45.0, (0.5,), 1, "the trainer has been silent for over 30 s"),
        (1.0, (), 1, "no worker is connected"),
        (1.0, (40.0, 31.0), 1, "every worker has disconnected or been silent for over 30 s"),
    ],
)
def test_exit_code(trainer_seen: float | None, worker_seen: tuple[float, ...], expected: int, reason: str) -> None:
    assert exit_code(_report(trainer_seen, worker_seen), stale_s=30.0) == (expected, reason)


def test_gone_roles_are_marked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    code = run_status(_args(tmp_path, "--stale-s", "10"), query=lambda *a: _report(None, (50.0,)), out=out)
    assert code == 1
    text = out.getvalue()
    assert "trainer  not connected" in text
    assert text.splitlines()[-1].endswith("GONE")
    assert "rulka status: the trainer is not connected" in capsys.readouterr().err


def test_json_output_is_the_report(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_status(_args(tmp_path, "--json"), query=lambda *a: _report(), out=out) == 0
    assert json.loads(out.getvalue()) == _report()


def test_format_without_workers() -> None:
    assert format_status({"trainer": None, "workers": []}).splitlines() == [
        "trainer  not connected", "workers  none connected"]


def test_parse_server() -> None:
    assert parse_server("10.0.0.2:55555") == ("10.0.0.2", 55555)
    assert parse_server("[::1]:9000") == ("::1", 9000)
    for bad in ("localhost", ":55555", "host:0", "host:http"):
        with pytest.raises(UserError, match="HOST:PORT"):
            parse_server(bad)


def test_user_mistakes_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--server", "nohost", "--keys", str(tmp_path)]) == 2
    assert main(["status", "--server", "127.0.0.1:1", "--keys", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: --server must look like HOST:PORT")
    assert err[1].startswith("error: credentials folder") and "rulka keys" in err[1]


def test_the_servers_view_of_connections_counts() -> None:
    report = _report()
    report["server"] = {
        "uptime_s": 75.5, "trainer_connected": True, "workers_connected": ["pc1"], "bad_inputs": {"auth": 2, "size": 1},
        "clients": {"pc1": {"connected": True}, "pc2": {"connected": False}, "trainer": {"connected": True}},
    }
    text = format_status(report)
    assert text.splitlines()[0] == "server   uptime 75.5s  trainer connected yes  workers connected 1  bad inputs 3"
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("pc")}
    assert not rows["pc1"].endswith("GONE") and rows["pc2"].endswith("GONE")  # pc2 left, though seen 2 s ago
    assert exit_code(report, 30.0) == (0, "")
    report["server"]["clients"]["pc1"]["connected"] = False
    assert exit_code(report, 30.0) == (1, "every worker has disconnected or been silent for over 30 s")
    report["server"]["trainer_connected"] = False
    assert exit_code(report, 30.0) == (1, "the trainer has disconnected")
