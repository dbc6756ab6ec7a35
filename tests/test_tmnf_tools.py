"""``rulka tm ... --game tmnf``: plugin install, set-up check, reference-line recording."""

from __future__ import annotations

import numpy as np

from rulka.cli import main
from rulka.envs.reference_line import ReferenceLine
from rulka.envs.sim.tracks import get_track
from rulka.envs.tmnf.tools import PLUGIN_NAME, plugin_source


def test_install_plugin_then_check_reports_ready(tmp_path, capsys):
    plugins = tmp_path / "TMInterface" / "Plugins"
    plugins.mkdir(parents=True)
    (tmp_path / "TrackMania" / "Tracks").mkdir(parents=True)
    sets = ["--set", f"user.target_python_link_path={plugins / PLUGIN_NAME}",
            "--set", f"user.trackmania_base_path={tmp_path / 'TrackMania'}",
            "--set", "environment.game_launch=attach", "--set", "user.base_tmi_port=1"]
    assert main(["tm", "check", "--game", "tmnf", *sets]) == 1
    out = capsys.readouterr().out
    assert f"FAIL rulka plugin: {plugins / PLUGIN_NAME} missing: `rulka tm install-plugin`" in out

    assert main(["tm", "install-plugin", "--game", "tmnf", *sets]) == 0
    assert (plugins / PLUGIN_NAME).read_bytes() == plugin_source()
    capsys.readouterr()
    assert main(["tm", "check", "--game", "tmnf", *sets]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "ok   rulka plugin" in out

    (plugins / PLUGIN_NAME).write_text("// an older version")
    (plugins / "Python_Link.as").write_text("// Linesight's")
    assert main(["tm", "check", "--game", "tmnf", *sets]) == 1
    out = capsys.readouterr().out
    assert "is another version" in out and "also uses custom_port" in out


def test_the_shipped_plugin_speaks_every_message_of_the_protocol():
    from rulka.envs.tmnf.protocol import MessageType

    text = plugin_source().decode()
    for m in MessageType:
        assert m.name in text
    assert 'Listen("127.0.0.1"' in text and "custom_port" in text


def test_record_line_on_the_fake_game_writes_what_reference_line_loads(tmp_path, capsys):
    out = tmp_path / "maps" / "hairpins_0.5m_cl"
    assert main(["tm", "record-line", "--game", "tmnf", "--fake", "--map", "hairpins", "--out", str(out)]) == 0
    assert "recorded hairpins" in capsys.readouterr().out
    npy = np.load(out.with_suffix(".npy"), allow_pickle=False)
    assert npy.dtype == np.float64 and npy.shape[1] == 3
    assert np.allclose(np.linalg.norm(np.diff(npy, axis=0), axis=1), 0.5, atol=0.05)
    track = get_track("hairpins")
    line = ReferenceLine.load(out.with_suffix(".json"))
    # the fake has two checkpoint gates before the finish: both recorded as real checkpoints
    assert line.checkpoint_positions is not None and len(line.checkpoint_positions) == 2
    # the driven line follows the track: same length within 10 %, ends at the finish
    assert abs(line.length - track.length) < 0.1 * track.length
    finish = track.centerline[track.finish_index]
    assert np.linalg.norm(npy[-1] - finish) < 5.0
    assert ReferenceLine.load(out.with_suffix(".npy")).n_zones == len(npy) + 20 + 1000
    # `rulka sim render --line` drives the track against the recorded line and draws it
    assert main(["sim", "render", "--track", "hairpins", "--line", str(out.with_suffix(".json")),
                 "--out", str(tmp_path / "pics"), "--no-animation"]) == 0
    assert "hairpins: driver finished" in capsys.readouterr().out
    assert (tmp_path / "pics" / "hairpins_driver.png").stat().st_size > 1000
