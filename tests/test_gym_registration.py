"""Gymnasium conventions: ``import rulka`` (or gymnasium's ``module:EnvId`` form) registers
``rulka/SimTrack-v0`` without importing torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

SNIPPETS = {
    "import rulka": "import rulka, gymnasium as gym; env = gym.make('rulka/SimTrack-v0', track='slalom')",
    "module:EnvId": "import gymnasium as gym; env = gym.make('rulka:rulka/SimTrackAnalog-v0')",
}


@pytest.mark.parametrize("form", sorted(SNIPPETS))
def test_registration_makes_the_env_in_a_fresh_interpreter_without_torch(form: str) -> None:
    code = SNIPPETS[form] + (
        "\nobs, info = env.reset(seed=0)"
        "\nobs, reward, terminated, truncated, info = env.step(env.action_space.sample())"
        "\nimport sys; print(info['track'], type(env.unwrapped).__name__, 'torch' in sys.modules,"
        " env.action_space.shape)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    track, cls, torch_loaded, shape = proc.stdout.split(maxsplit=3)
    assert cls == "SimTrackEnv" and torch_loaded == "False"
    assert shape.strip() == ("()" if form == "import rulka" else "(3,)")  # Discrete(12) / Box(3)
    assert track == ("slalom" if form == "import rulka" else "default")
