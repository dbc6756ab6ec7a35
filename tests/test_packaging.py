"""Packaging: the built wheel carries everything an editable install reads (tracks, game plugins,
run configs) and works from a fresh virtual environment; the ``trackmania`` extra covers what the
game backends import; bundled configs are found from any folder."""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from rulka.bundled import bundled_config, bundled_configs

REPO = Path(__file__).resolve().parents[1]
GAME_BACKENDS = ("tmnf", "tm2020")
# modules a game backend may import -> the distribution that provides them (Windows-only ones
# are not installed on Linux CI, so the map says where they come from)
WINDOWS_MODULES = {
    "win32api": "pywin32", "win32con": "pywin32", "win32gui": "pywin32", "win32process": "pywin32",
    "win32ui": "pywin32", "pywintypes": "pywin32", "vgamepad": "vgamepad", "mss": "mss",
}


def _requirement_names(lines: str) -> set[str]:
    names = set()
    for line in lines.strip().splitlines():
        name = line.split(";")[0].strip()
        for sep in "<>=!~[ ":
            name = name.split(sep)[0]
        if name:
            names.add(name.lower().replace("_", "-"))
    return names


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg


def _third_party_imports(folder: Path) -> set[str]:
    """Top-level modules imported by the .py files under ``folder`` that are neither stdlib nor rulka."""
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m != "rulka" and m not in sys.stdlib_module_names and m != "__future__"}


def test_trackmania_extra_lists_what_the_game_backends_import() -> None:
    from importlib.metadata import packages_distributions

    cfg = _setup_cfg()
    provided = _requirement_names(cfg["options"]["install_requires"])
    extra = _requirement_names(cfg["options.extras_require"]["trackmania"])
    assert {"vgamepad", "pywin32"} <= extra  # gamepad input and window control on the gaming PC
    installed = {m: {d.lower().replace("_", "-") for d in ds} for m, ds in packages_distributions().items()}
    missing = []
    for backend in GAME_BACKENDS:
        folder = REPO / "rulka" / "envs" / backend
        if not folder.is_dir():
            continue
        for module in sorted(_third_party_imports(folder)):
            dists = {WINDOWS_MODULES[module]} if module in WINDOWS_MODULES else installed.get(module, {module})
            if not dists & (provided | extra):
                missing.append(f"{backend} imports {module} ({'/'.join(sorted(dists))})")
    assert not missing, "add to setup.cfg [options.extras_require] trackmania: " + "; ".join(missing)


def test_bundled_configs_are_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"sim_iqn.yaml", "cartpole_iqn.yaml", "default.yaml"} <= set(bundled_configs())
    monkeypatch.chdir(tmp_path)
    assert bundled_config("configs/sim_iqn.yaml") == bundled_config("sim_iqn.yaml") is not None
    assert bundled_config("configs/nope.yaml") is None and bundled_config("other/sim_iqn.yaml") is None
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "sim_iqn.yaml").write_text("training: {batch_size: 8}\n")
    assert bundled_config("configs/sim_iqn.yaml") is None  # a file that exists is always read itself

    from rulka.config import load_config

    assert load_config("configs/cartpole_iqn.yaml", env_file=None).environment.gym_id == "CartPole-v1"


def _source_files() -> list[str]:
    """What a clone holds: tracked files plus untracked ones git does not ignore."""
    proc = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip("packaging test needs a git checkout")
    return [f for f in proc.stdout.splitlines() if (REPO / f).is_file()]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """The command's stdout; its failure shows both streams."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


BUILD = ("import sys; from setuptools import build_meta as b; "
         "print(getattr(b, 'build_' + sys.argv[1])(sys.argv[2]))")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_wheel_built_from_the_sdist_installs_and_runs_from_a_fresh_venv(tmp_path: Path) -> None:
    files = _source_files()
    src = tmp_path / "src"
    for name in files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    # a game plugin file in each backend folder: setup.cfg's globs must ship them
    probes = []
    for backend in GAME_BACKENDS:
        for rel in (f"rulka/envs/{backend}/plugin_probe/Probe.as", f"rulka/envs/{backend}/plugin_probe/info.toml"):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_text("// packaging probe\n")
            probes.append(rel)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

    # sdist from the source, then the wheel from the unpacked sdist: the sdist must be complete
    dist = tmp_path / "dist"
    sdist_name = _run([sys.executable, "-c", BUILD, "sdist", str(dist)], src, env).strip().splitlines()[-1]
    with tarfile.open(dist / sdist_name) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    unpacked = next((tmp_path / "unpacked").iterdir())
    wheel_name = _run([sys.executable, "-c", BUILD, "wheel", str(dist)], unpacked, env).strip().splitlines()[-1]
    wheel = dist / wheel_name
    names = set(zipfile.ZipFile(wheel).namelist())
    package_data = [f for f in files if f.startswith("rulka/") and not f.endswith(".py")] + probes
    assert not [f for f in package_data if f not in names], "package data missing from the wheel"
    configs = [f"rulka/configs/{p.name}" for p in (REPO / "configs").glob("*.yaml")]
    assert configs and not [c for c in configs if c not in names], "run configs missing from the wheel"
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]

    # a fresh venv with the wheel; its dependencies (torch included) come from this environment
    # through a .pth line, so nothing is downloaded; `pip check` says the wheel's requirements hold
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    py = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, env)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site.strip()) / "_rulka_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
         tmp_path, env)
    _run([sys.executable, "-m", "pip", "--python", str(py), "check"], tmp_path, env)

    work = tmp_path / "work"  # no rulka/ and no configs/ here: everything comes from the wheel
    work.mkdir()
    env["PATH"] = f"{py.parent}{os.pathsep}{env.get('PATH', '')}"
    where = _run([str(py), "-c", "import rulka, rulka.envs.sim.tracks as t; print(rulka.__file__)"], work, env)
    assert Path(where.strip()).is_relative_to(venv)
    rulka_cmd = str(py.parent / "rulka")
    assert "default: finished in" in _run([rulka_cmd, "sim", "drive"], work, env)
    assert _run([rulka_cmd, "config", "validate", "configs/sim_iqn.yaml"], work, env).startswith("ok: ")
    run = tmp_path / "run"
    _run([rulka_cmd, "run", "configs/sim_iqn.yaml", "--workers", "1", "--minutes", "0.34", "--run-dir", str(run)],
         work, env, timeout=300)
    assert (run / "config.resolved.yaml").is_file() and (run / "metrics.jsonl").is_file()
    assert (run / "weights" / "policy.safetensors").is_file()
    report = _run([rulka_cmd, "eval", str(run), "--episodes", "1", "--max-steps", "20"], work, env)
    assert "sim (default)" in report
