"""`rulka config validate|show|defaults|keys`: exit codes, one-line errors, reloadable output."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rulka.cli import main
from rulka.config import RulkaConfig, load_config

REPO = Path(__file__).resolve().parents[1]


def _rulka() -> str:
    return shutil.which("rulka") or str(Path(sys.executable).parent / "rulka")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_rulka(), "config", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_validate_good_file_exits_zero_with_a_summary(tmp_path: Path) -> None:
    proc = _run(
        "validate", str(REPO / "configs" / "default.yaml"), "--set", "training.batch_size=256", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("ok: ") and "float_input_dim 184" in lines[0] and "1 override(s)" in lines[0]


def test_validate_unknown_key_is_one_line_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("memory:\n  batch_size: 3\n")
    proc = _run("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        f"error: {path}: config key `memory.batch_size` is unknown; did you mean `training.batch_size`?\n"
    )


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("training: [1,\n", "bad.yaml: line 2, column 1: bad YAML"),
        (None, "bad.yaml does not exist"),
        ("training:\n  algorithm: dqn\n", "config key `training.algorithm` must be one of"),
    ],
)
def test_validate_errors_via_main(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    content: str | None,
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["config", "validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ") and needle in lines[0]


def test_validate_reads_env_file_from_cwd(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("RULKA_PORT=not-a-port\n")
    (tmp_path / "run.yaml").write_text("training: {batch_size: 64}\n")
    proc = _run("validate", "run.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "RULKA_PORT" in proc.stderr and "`network.port`" in proc.stderr


def test_show_prints_yaml_that_reloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text("training:\n  batch_size: 64\n")
    assert main(["config", "show", "run.yaml", "--set", "nn.iqn.n=16", "--computed"]) == 0
    out = capsys.readouterr().out
    assert "#   float_input_dim: 184" in out
    (tmp_path / "shown.yaml").write_text(out)
    cfg = load_config(tmp_path / "shown.yaml", env_file=None)
    assert (cfg.training.batch_size, cfg.nn.iqn.n) == (64, 16)


def test_show_error_via_main_returns_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show", "--set", "nn.iqn.k=3"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "error: --set nn.iqn.k=3: config key `nn.iqn.k` must be even (quantiles are drawn in symmetric pairs), got 3\n"
    )


def test_defaults_is_the_reference_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["config", "defaults"]) == 0
    out = capsys.readouterr().out
    assert out == (REPO / "configs" / "default.yaml").read_text()
    (tmp_path / "d.yaml").write_text(out)
    assert load_config(tmp_path / "d.yaml", env_file=None) == RulkaConfig()


def test_keys_lists_paths(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "keys", "nn.iqn."]) == 0
    assert capsys.readouterr().out.split() == [
        "nn.iqn.embedding_dimension",
        "nn.iqn.n",
        "nn.iqn.k",
        "nn.iqn.kappa",
        "nn.iqn.freeze",
    ]


def test_config_without_action_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config"]) == 2
    assert "validate" in capsys.readouterr().out


def test_validate_reports_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    good = REPO / "configs" / "default.yaml"
    (tmp_path / "a.yaml").write_text("nn: {iqn: {n: 3}}\n")
    (tmp_path / "b.yaml").write_text("exploration: {epsilon: 0.1}\n")
    assert main(["config", "validate", str(good), "a.yaml", "b.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith(f"ok: {good} - ")
    errors = captured.err.strip().splitlines()
    assert errors[0].startswith("error: a.yaml: config key `nn.iqn.n` must be even")
    assert errors[1].startswith("error: b.yaml: config key `exploration.epsilon` is unknown")


def test_show_changed_prints_only_differences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show", "--changed"]) == 0
    assert capsys.readouterr().out == "{}\n"
    assert (
        main(["config", "show", "--changed", "--set", "training.batch_size=64", "--set", "nn.iqn.n=16"]) == 0
    )
    assert capsys.readouterr().out == "nn:\n  iqn:\n    n: 16\ntraining:\n  batch_size: 64\n"


def test_env_lists_variables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "env"]) == 0
    out = capsys.readouterr().out
    assert "WANDB_ENTITY" in out and "-> logging.wandb.entity" in out


def test_check_plugins_names_the_key_of_a_missing_plugin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text("trainer:\n  agent: nope\n")
    assert main(["config", "validate", "run.yaml", "--check-plugins"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run.yaml: config key `trainer.agent`: unknown agent plugin 'nope' (registered: ")


@pytest.mark.parametrize("check_plugins", [[], ["--check-plugins"]])
@pytest.mark.parametrize(
    "setting, key",
    [
        ("training.algorithm=sac", "environment.continuous_actions"),  # SAC on the discrete sim
        ("environment.backend=tmnf", "map_cycle.entries"),
        ("trainer.memory=no_such_memory", "trainer.memory"),
        ("worker.compressor=lz5", "worker.compressor"),
    ],
)
def test_validate_answers_what_the_start_would_for_plugins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch, setting: str, key: str, check_plugins: list[str]
) -> None:
    """An algorithm or backend that validates must start: one that is not built fails validation,
    with or without --check-plugins, naming the key."""
    monkeypatch.chdir(tmp_path)
    assert main(["config", "validate", str(REPO / "configs" / "default.yaml"), "--set", setting, *check_plugins]) == 2
    err = capsys.readouterr().err.strip()
    assert f"config key `{key}`" in err and "\n" not in err


def test_validate_refuses_a_key_that_is_not_built_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text("performance:\n  gpu_collectors_count: 2\n")
    assert main(["config", "validate", "run.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: run.yaml: config key `performance.gpu_collectors_count` is not built yet (documented, but nothing "
        "acts on it: performance.gpu_collectors_count: rulka's collectors are worker processes or machines: "
        "`rulka run --workers N` or one rulka-worker per game); remove it or use the default"
    )
    # the same value at its default is fine
    (tmp_path / "run.yaml").write_text("performance:\n  gpu_collectors_count: 4\n")
    assert main(["config", "validate", "run.yaml"]) == 0


def test_roles_refuse_to_start_with_a_key_that_is_not_built(tmp_path: Path) -> None:
    """The trainer's start gives the same one-line refusal as validate (before it needs keys)."""
    out = subprocess.run([sys.executable, "-m", "rulka.trainer.cli", "--config", str(REPO / "configs" / "sim_iqn.yaml"), "--set", "performance.gpu_collectors_count=2",
                          "--keys", str(tmp_path / "none")], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].endswith(
        "config key `performance.gpu_collectors_count` is not built yet (documented, but nothing acts on it: "
        "performance.gpu_collectors_count: rulka's collectors are worker processes or machines: "
        "`rulka run --workers N` or one rulka-worker per game); remove it or use the default"
    )
