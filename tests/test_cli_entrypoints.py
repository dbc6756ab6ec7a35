"""Every console script explains itself with --help and fails on one line on user mistakes."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from rulka.cli import main

SCRIPTS = ["rulka", "rulka-server", "rulka-worker", "rulka-trainer"]


def _script(name: str) -> list[str]:
    path = shutil.which(name) or str(__import__("pathlib").Path(sys.executable).parent / name)
    return [path]


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_exits_zero_and_describes_the_command(name: str) -> None:
    proc = subprocess.run([*_script(name), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout
    assert name in proc.stdout


def test_umbrella_lists_its_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "config" in out


def test_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["definitely-not-a-command"])
    assert exc.value.code == 2
