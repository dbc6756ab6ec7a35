from __future__ import annotations

import subprocess
import sys

import pytest

from rulka.server.cli import build_parser, main, resolve


def test_help_explains_itself(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "relay" in out and "--keys" in out and "--port" in out


def test_missing_keys_folder_is_one_line_error(tmp_path, capsys):
    assert main(["--keys", str(tmp_path / "nope"), "--port", "0", "--log-file", str(tmp_path / "server.log")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: keys folder") and "rulka keys generate" in err[-1]


def test_config_and_set_reach_the_transport_settings(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("network:\n  port: 6001\n  chunk_bytes: 131072\n  credentials_dir: /somewhere/keys\n")
    args = build_parser().parse_args(["--config", str(cfg), "--set", "network.heartbeat_s=2.5"])
    settings, keys = resolve(args)
    assert (settings["port"], settings["chunk_bytes"], settings["heartbeat_s"]) == (6001, 131072, 2.5)
    assert str(keys) == "/somewhere/keys"
    args = build_parser().parse_args(["--config", str(cfg), "--keys", str(tmp_path)])
    assert resolve(args)[1] == tmp_path


def test_unknown_key_is_one_line_error(tmp_path):
    log_file = tmp_path / "logs" / "server.log"
    proc = subprocess.run([sys.executable, "-m", "rulka.server.cli", "--set", "network.chunk_byte=5",
                           "--keys", str(tmp_path), "--log-file", str(log_file)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error:")
    assert "Traceback" not in proc.stderr
    # the relay's log file keeps why it stopped, dated, once
    [line] = log_file.read_text(encoding="utf-8").splitlines()
    assert line.endswith("rulka-server stopped: " + error.removeprefix("error: ")), line
