"""``rulka sim`` commands: tracks, drive, render (GIF + PNG), saved policies."""

from __future__ import annotations

import json
from typing import Any

import cv2
import imageio.v2 as imageio
import numpy as np
import pytest

from rulka.cli import main
from rulka.envs.sim.policy import load_policy, save_policy
from rulka.errors import UserError
from rulka.interfaces import ActorModule


class ConstActor(ActorModule):
    """A policy that always presses one action (enough to test loading and rendering)."""

    def __init__(self, action: int = 0) -> None:
        self.action = action
        self.bias = np.zeros(1, dtype=np.float32)

    def act(self, obs: Any, test: bool = False) -> int:
        assert set(obs) == {"img", "float"}
        return self.action + int(self.bias[0])

    def load_weights(self, weights: Any) -> None:
        self.bias = np.asarray(weights["bias"])

    def get_weights(self) -> dict[str, Any]:
        return {"bias": self.bias}


def test_tracks_lists_bundled_tracks_as_json(capsys):
    assert main(["sim", "tracks", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} >= {"default", "hairpins", "slalom", "dirt_mix", "turbo_straight"}
    assert all(r["reference_time_ms"] > 0 for r in rows)


def test_drive_prints_race_time(capsys):
    assert main(["sim", "drive", "--track", "slalom"]) == 0
    out = capsys.readouterr().out
    assert "slalom: finished in" in out and "reference" in out


def test_unknown_track_is_a_one_line_error(capsys):
    assert main(["sim", "drive", "--track", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown track 'nope'") and err.count("\n") == 1


def test_render_writes_gif_and_png(tmp_path, capsys):
    code = main(["sim", "render", "--track", "slalom", "--max-seconds", "1.5", "--every", "3",
                 "--out", str(tmp_path)])
    assert code == 0
    gif, png = tmp_path / "slalom_driver.gif", tmp_path / "slalom_driver.png"
    frames = imageio.mimread(gif)
    assert 8 <= len(frames) <= 12  # 30 actions, one frame in 3, plus the first
    assert frames[0].shape[:2] == (256, 512)
    picture = cv2.imread(str(png))
    assert picture is not None and picture.ndim == 3 and max(picture.shape[:2]) == 800
    assert "stopped at 1.50 s" in capsys.readouterr().out


def test_render_with_saved_policy(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "weights").mkdir(parents=True)
    save_policy(run / "weights" / "policy.safetensors", {"bias": np.zeros(1, dtype=np.float32)},
                {"actor": "test_render_sim:ConstActor", "kwargs": {"action": 0}})
    actor, spec = load_policy(run)
    assert isinstance(actor, ConstActor) and spec["kwargs"] == {"action": 0}
    assert main(["sim", "render", "--policy", str(run), "--max-seconds", "1", "--no-animation",
                 "--out", str(tmp_path)]) == 0
    assert (tmp_path / "default_policy.png").is_file()
    assert not (tmp_path / "default_policy.gif").exists()


def test_policy_errors_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no policy"):
        load_policy(tmp_path)
    bad = tmp_path / "policy.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="cannot read policy file"):
        load_policy(bad)
    from safetensors.numpy import save_file

    save_file({"bias": np.zeros(1, dtype=np.float32)}, str(bad))
    with pytest.raises(UserError, match="actor_spec"):
        load_policy(bad)


def test_mp4_animation(tmp_path):
    from rulka.envs.sim.render import write_animation

    frames = [np.full((32, 48, 3), 40 * k, dtype=np.uint8) for k in range(5)]
    path = tmp_path / "a.mp4"
    write_animation(path, frames, fps=10)
    cap = cv2.VideoCapture(str(path))
    try:
        assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 5
        ok, first = cap.read()
        assert ok and first.shape == (32, 48, 3)
    finally:
        cap.release()


def test_reference_command_reports_stored_and_driven_times(capsys):
    assert main(["sim", "reference", "--track", "slalom"]) == 0
    line = capsys.readouterr().out.strip()
    stored, driven = (int(w) for w in line.split() if w.isdigit())
    assert stored == driven  # the stored reference time is what the driver does today
    assert main(["sim", "reference", "--track", "nope"]) == 2
