"""`rulka tm ... --game tm2020`: the shipped plugin matches the client's record layout, the plugin
installs, check reports what is missing, and record-line writes a usable reference line."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from rulka.cli import main
from rulka.envs.reference_line import ReferenceLine
from rulka.envs.sim.tracks import get_track
from rulka.envs.tm2020 import telemetry as T
from rulka.envs.tm2020.fake import FakeTM2020
from rulka.envs.tm2020.tools import install_plugin, plugin_source_dir, record_line


def test_plugin_writes_the_record_layout_the_client_reads() -> None:
    src = (plugin_source_dir() / "main.as").read_text()
    assert f"const uint16 N_FIELDS = {T.N_FIELDS};" in src
    assert f"const uint16 RECORD_VERSION = {T.VERSION};" in src
    assert f"uint S_Port = {T.DEFAULT_PORT};" in src
    body = src[src.index("void SendRecord"):src.index("void Main")]
    header_writes = 4 + 3  # magic bytes, version, field count, frame counter
    floats = body.count("buf.Write(") - header_writes + 3 * body.count("WriteVec(buf")
    assert floats == T.N_FIELDS
    assert re.search(r'dependencies\s*=\s*\["VehicleState"\]', (plugin_source_dir() / "info.toml").read_text())


def test_install_plugin_copies_the_package_data(tmp_path, capsys) -> None:
    assert main(["tm", "install-plugin", "--game", "tm2020", "--dest", str(tmp_path)]) == 0
    target = tmp_path / "rulka_telemetry"
    assert sorted(p.name for p in target.iterdir()) == ["info.toml", "main.as"]
    assert (target / "main.as").read_text() == (plugin_source_dir() / "main.as").read_text()
    assert "Developer" in capsys.readouterr().out
    with pytest.raises(Exception, match="does not exist"):
        install_plugin(tmp_path / "missing")


def test_check_against_the_fake_plugin_and_a_missing_one(capsys) -> None:
    assert main(["tm", "check", "--game", "tm2020", "--fake", "--timeout", "5"]) == 0
    assert "ok   plugin: telemetry on 127.0.0.1" in capsys.readouterr().out
    if sys.platform != "win32":
        # nothing listens on an unused port; no window, no gamepad driver on a CI machine
        code = main(["tm", "check", "--game", "tm2020", "--timeout", "0.5", "--set", "environment.tm2020.plugin_port=1"])
        out = capsys.readouterr().out
        assert code == 1 and "FAIL plugin: not listening on 127.0.0.1:1" in out and "FAIL control" in out


@pytest.mark.slow
def test_record_line_follows_a_driven_lap(tmp_path) -> None:
    out = tmp_path / "line.json"
    with FakeTM2020(time_scale=4.0, countdown_s=0.3) as game, T.TelemetryClient(port=game.port) as client:
        assert client.wait_newer(None, 5.0) is not None
        game.press_reset()
        game.start_autopilot()
        try:
            record_line(client, out, 0.5, start_timeout_s=20, lap_timeout_s=120)
        finally:
            game.stop_autopilot()
    line = ReferenceLine.load(out)
    track = get_track("default")
    assert line.length == pytest.approx(track.length, rel=0.03)
    # every recorded point lies on the road near the track's centreline
    centre = track.race_line()
    d = np.min(np.linalg.norm(line.track_points[:, None, [0, 2]] - centre[None, :, [0, 2]], axis=2), axis=1)
    assert d.max() < float(track.widths.max()) / 2
