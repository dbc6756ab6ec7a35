"""Both game plugins compiled by the real AngelScript compiler against the games' published APIs.

tests/angelscript/README.md says what is vendored and how. The harness (tests/angelscript/
as_check.cpp) is built here with g++ against Debian's angelscript-dev 2.35; without that library
the tests skip with the install hint, except under CI=true, where they fail (.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AS_DIR = ROOT / "tests" / "angelscript"
TMNF_PLUGIN = ROOT / "rulka" / "envs" / "tmnf" / "plugin" / "RulkaLink.as"
TM2020_PLUGIN = ROOT / "rulka" / "envs" / "tm2020" / "plugin" / "main.as"
INSTALL_HINT = "AngelScript compiler missing: apt-get install -y angelscript-dev"

sys.path.insert(0, str(AS_DIR))
import make_config  # noqa: E402


def _library_present() -> bool:
    return (Path("/usr/include/angelscript.h").exists() and shutil.which("g++") is not None
            and any(Path(d, "libangelscript.so").exists() or Path(d, "libangelscript.a").exists()
                    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib")))


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    if not _library_present():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{INSTALL_HINT} (CI=true: the compile check must run)")
        pytest.skip(INSTALL_HINT)
    out = tmp_path_factory.mktemp("as_check")
    exe = out / "as_check"
    subprocess.run(["g++", "-O1", "-std=c++17", "-DAS_USE_NAMESPACE", "-I/usr/include/angelscript",
                    str(AS_DIR / "as_check.cpp"), "-o", str(exe),
                    "-langelscript-addon", "-langelscript", "-lpthread"], check=True)
    configs = {}
    for host in ("tminterface", "openplanet"):
        configs[host] = out / f"{host}.cfg"
        configs[host].write_text(make_config.build(host), encoding="utf-8")

    def run(host: str, script: Path) -> tuple[int, str]:
        p = subprocess.run([str(exe), str(configs[host]), str(script)], capture_output=True, text=True,
                           timeout=120)
        return p.returncode, p.stdout + p.stderr
    return run


def _errors(output: str, script: Path) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2)) for m in
            re.finditer(rf"^{re.escape(str(script))}:(\d+):\d+: ERR: (.*)$", output, re.M)]


@pytest.mark.parametrize("host,plugin", [("tminterface", TMNF_PLUGIN), ("openplanet", TM2020_PLUGIN)])
def test_plugin_compiles_against_published_api(check, host, plugin):
    rc, out = check(host, plugin)
    assert re.search(r"^config: \d+ declarations registered, 0 refused$", out, re.M), out[-3000:]
    assert rc == 0 and "build: ok, 0 errors" in out, out[-3000:]


def _plant(tmp_path: Path, plugin: Path, after: str, statement: str) -> tuple[Path, int]:
    lines = plugin.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == after) + 1
    lines.insert(at, statement)
    copy = tmp_path / plugin.name
    copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return copy, at + 1  # 1-based line of the planted statement


# (host, plugin, line the statement goes after, statement, expected message)
PLANTED = [
    ("tminterface", TMNF_PLUGIN, "RegisterVariable(\"custom_port\", 0);", "    NoSuchTmiFunction(1);",
     "No matching symbol 'NoSuchTmiFunction'"),
    ("tminterface", TMNF_PLUGIN, "RegisterVariable(\"custom_port\", 0);", "    GetSimulationManager().SetSpeed(\"fast\", 2);",
     "No matching signatures to 'SimulationManager::SetSpeed(const string, const int)'"),
    ("openplanet", TM2020_PLUGIN, "Listen();", "        NoSuchOpenplanetFunction();",
     "No matching symbol 'NoSuchOpenplanetFunction'"),
    ("openplanet", TM2020_PLUGIN, "Listen();", "        g_server.Listen(true, \"127.0.0.1\", 3);",
     "No matching signatures to 'Socket::Listen(const bool, const string, const int)'"),
]


@pytest.mark.parametrize("host,plugin,after,statement,message", PLANTED)
def test_planted_error_is_refused_with_its_line(check, tmp_path, host, plugin, after, statement, message):
    copy, line = _plant(tmp_path, plugin, after, statement)
    rc, out = check(host, copy)
    assert rc == 1, out[-3000:]
    errors = _errors(out, copy)
    assert (line, message) in errors, (line, errors)
