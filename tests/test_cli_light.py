"""Commands that only read files or print help never import torch (about 5 CPU seconds a call).

``rulka config validate`` is what a user runs on a recipe before anything else, and what the
tests run in real processes: what it checks lives in torch-free modules (``rulka.nn.topology``
for the ``nn`` keys a network would not read). Each command here runs in a fresh interpreter,
which says on its last stderr line whether torch got imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rulka.cli import main

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import sys
from rulka.cli import main
try:
    code = main(sys.argv[1:])
finally:
    sys.stdout.flush()
    print("torch imported" if "torch" in sys.modules else "torch not imported", file=sys.stderr)
sys.exit(code)
"""


def _probe(*argv: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``rulka ARGV`` in a fresh interpreter: the process and its stderr without the last line,
    asserting that torch was not imported."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120,
                          cwd=cwd)
    *err, last = proc.stderr.splitlines() or [""]
    assert last == "torch not imported", proc.stderr[-2000:]
    return proc, "".join(line + "\n" for line in err)


def test_validate_needs_no_torch_and_says_what_a_process_with_torch_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Every shipped config, plus files refused for keys their network would not read (fusion keys
    with fusion_mode none, a freeze flag on SAC) and for a key nothing builds: the same lines and
    exit code as ``main`` in this process, where torch is loaded."""
    import torch  # noqa: F401  (the in-process reference run has torch loaded)

    bad = {
        "fusion_inert.yaml": "nn:\n  fusion_mode: post_concat\n  encoder:\n    fusion_encoder: linear\n"
                             "    transformer:\n      n_layers: 3\n",
        "encoder_inert.yaml": "nn:\n  encoder:\n    post_concat_layout: token_sequence\n",
        "freeze_on_sac.yaml": "training:\n  algorithm: sac\nenvironment:\n  continuous_actions: true\n"
                              "nn:\n  vis:\n    no_image: true\n    freeze: true\n",
        "not_built.yaml": "performance:\n  gpu_collectors_count: 3\n",
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
    files = [str(p) for p in sorted((REPO / "configs").glob("*.yaml"))] + sorted(bad)
    monkeypatch.chdir(tmp_path)  # both read no ./.env and find the bad files by name

    proc, err = _probe("config", "validate", *files, cwd=tmp_path)
    assert main(["config", "validate", *files]) == proc.returncode == 2
    here = capsys.readouterr()
    assert (proc.stdout, err) == (here.out, here.err)
    assert [line.split(" - ")[0] for line in proc.stdout.splitlines()] == [f"ok: {f}" for f in files[:-len(bad)]]
    refused = dict(line.removeprefix("error: ").split(": ", 1) for line in err.splitlines())
    assert sorted(refused) == sorted(bad)
    assert "`nn.encoder.transformer.n_layers` is read only by fusion_encoder native_transformer" in refused[
        "fusion_inert.yaml"]
    assert "`nn.encoder` is read only when `nn.fusion_mode` is not none" in refused["encoder_inert.yaml"]
    assert "`nn.vis.freeze` does not apply to training.algorithm sac" in refused["freeze_on_sac.yaml"]
    assert "`performance.gpu_collectors_count` is not built yet" in refused["not_built.yaml"]


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["config", "show", "configs/sim_iqn.yaml", "--computed"],
    ["sim", "tracks"],
    ["tm", "doctor", "--help"],
    ["status", "--help"],
])
def test_light_commands_need_no_torch(argv: list[str]) -> None:
    proc, _ = _probe(*argv, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout
