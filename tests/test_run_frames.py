"""`rulka run --frames N`: the launcher stops a run once the trainer has received N env frames,
read from the trainer's metrics file as it grows."""

from __future__ import annotations

import json

from rulka.cli.run import FramesReceived


def _line(samples: int, step: int = 0) -> str:
    return json.dumps({"step": step, "wall_time": 0.0, "metrics": {"charts/samples_received": samples}}) + "\n"


def test_frames_follow_the_growing_metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    frames = FramesReceived(path)
    assert frames.latest() == 0  # no file yet: nothing received
    path.write_text(_line(120) + json.dumps({"step": 1, "wall_time": 0.0, "text": {"note": "x"}}) + "\n")
    assert frames.latest() == 120
    with open(path, "a") as fh:
        fh.write(_line(4000)[:25])  # the trainer is half way through writing a line
    assert frames.latest() == 120
    with open(path, "a") as fh:
        fh.write(_line(4000)[25:] + "not json\n" + _line(3900))
    assert frames.latest() == 4000  # the largest count seen; a broken line is skipped
