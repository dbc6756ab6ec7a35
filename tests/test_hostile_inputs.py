"""Files a stranger may hand a user never run code on the user's machine (issue 62; ARCHITECTURE.md
lesson 14): policy files, recipes and Hugging Face model folders. Each attack runs in a real
process with its address space bounded (RLIMIT_AS), must leave no marker file behind, and must end
in one ``error:`` line and exit 2; beside each, its harmless counterpart still works, and a user's
own plugins and model code still run when the user's command line allows them."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rulka import trust
from rulka.config import config_from_dict
from rulka.errors import ConfigError

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
MEMORY_LIMIT = 3 << 30  # the alias bomb reached 4.6 GB before; a refused one stays far below this


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A rulka command line in its own process (``-m MODULE`` or the umbrella ``rulka``)."""
    cmd = [sys.executable, "-m", *args] if args[0].startswith("rulka.") else [sys.executable, "-m", "rulka.cli", *args]
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO)]), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_memory,
                          env=full_env, cwd=str(REPO))


def assert_refused(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2 with exactly one line on stderr, ``error: ...`` holding every needle; returns it."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# policy files
# ---------------------------------------------------------------------------------------------

CARTPOLE_RUN = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"}}


def _policy(path: Path, actor: str, kwargs: dict) -> Path:
    from rulka.agents.simple import SimpleDQNActor
    from rulka.envs.sim.policy import save_policy

    weights = SimpleDQNActor(obs_dim=4, n_actions=2, hidden=8, seed=0).get_weights()
    save_policy(path, weights, {"actor": actor, "kwargs": kwargs, "run_config": CARTPOLE_RUN})
    return path


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    root = tmp_path_factory.mktemp("policies")
    marker = root / "pwned"
    return {
        "marker": marker,
        "good": _policy(root / "good.safetensors", "simple_dqn", {"obs_dim": 4, "n_actions": 2, "hidden": 8}),
        "popen": _policy(root / "popen.safetensors", "subprocess:Popen", {"args": ["touch", str(marker)]}),
        "open": _policy(root / "open.safetensors", "builtins:open", {"file": str(marker), "mode": "w"}),
        "extra": _policy(root / "extra.safetensors", "simple_dqn",
                         {"obs_dim": 4, "n_actions": 2, "hidden": 8, "args": ["touch", str(marker)]}),
    }


@pytest.mark.parametrize("name, module", [("popen", "subprocess"), ("open", "builtins")])
def test_a_policy_naming_any_callable_is_refused_by_eval_render_and_compare(policies, name, module, tmp_path):
    bad, good, marker = str(policies[name]), str(policies["good"]), policies["marker"]
    for args in (["eval", bad, "--episodes", "1"],
                 ["eval", good, "--compare", bad, "--episodes", "1"],
                 ["sim", "render", "--policy", bad, "--no-animation", "--out", str(tmp_path)]):
        line = assert_refused(run(*args), "actor_spec", f"--allow-plugin {module}")
        assert "policy file" in line
        assert not marker.exists(), args


def test_a_registered_actor_with_arguments_it_does_not_declare_is_refused_before_it_is_built(policies):
    assert_refused(run("eval", str(policies["extra"]), "--episodes", "1"), "takes no argument 'args'")
    assert not policies["marker"].exists()


def test_the_harmless_policy_still_drives(policies):
    proc = run("eval", str(policies["good"]), "--episodes", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["maps"]


# ---------------------------------------------------------------------------------------------
# recipes
# ---------------------------------------------------------------------------------------------

def _recipe(tmp_path: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.mark.parametrize("key, kind", [("memory", "memory"), ("agent", "agent")])
def test_a_recipe_naming_any_callable_is_refused_by_validate_and_the_trainer(tmp_path, key, kind):
    marker = tmp_path / "pwned"
    recipe = _recipe(tmp_path, f"""
        trainer:
          {key}: "subprocess:Popen"
          {key}_kwargs: {{args: [touch, {marker}]}}
        """)
    assert_refused(run("config", "validate", str(recipe)), f"trainer.{key}", "--allow-plugin subprocess")
    assert_refused(run("config", "validate", "--check-plugins", str(recipe)), "--allow-plugin subprocess")
    assert_refused(run("rulka.trainer.cli", "--config", str(recipe), "--run-dir", str(tmp_path / "run"),
                       "--server", "127.0.0.1:9"), f"trainer.{key}", "--allow-plugin subprocess")
    assert not marker.exists()


def test_a_worker_compressor_and_a_gym_module_from_a_recipe_are_refused(tmp_path):
    recipe = _recipe(tmp_path, """
        worker: {compressor: "os:system"}
        """)
    assert_refused(run("config", "validate", str(recipe)), "worker.compressor", "--allow-plugin os")
    recipe = _recipe(tmp_path, """
        environment: {backend: gym, gym_id: "antigravity:Fly-v0"}
        """, "gym.yaml")
    assert_refused(run("config", "validate", str(recipe)), "environment.gym_id", "--allow-plugin antigravity")


def test_a_users_own_plugin_runs_when_the_command_line_allows_it(tmp_path):
    """--allow-plugin MODULE (here the tests' roles_helpers) lets a recipe name MODULE:Class."""
    recipe = _recipe(tmp_path, """
        environment: {backend: gym, gym_id: CartPole-v1}
        trainer: {memory: "roles_helpers:ListMemory"}
        """)
    assert_refused(run("config", "validate", "--check-plugins", str(recipe)), "--allow-plugin roles_helpers")
    proc = run("config", "validate", "--check-plugins", "--allow-plugin", "roles_helpers", str(recipe))
    assert proc.returncode == 0 and "memory=roles_helpers:ListMemory" in proc.stdout, proc.stderr


def test_a_users_installed_entry_point_plugin_needs_no_flag(tmp_path):
    """A plugin installed as a 'rulka.plugins' entry point (KIND.NAME) is used by its name."""
    site = tmp_path / "site"
    (site / "my_store").mkdir(parents=True)
    (site / "my_store" / "__init__.py").write_text("from roles_helpers import ListMemory as Store\n")
    dist = site / "my_store-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-store\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[rulka.plugins]\nmemory.my_store = my_store:Store\n")
    recipe = _recipe(tmp_path, """
        environment: {backend: gym, gym_id: CartPole-v1}
        trainer: {memory: my_store}
        """)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(TESTS), str(REPO)])}
    proc = run("config", "validate", "--check-plugins", str(recipe), env=env)
    assert proc.returncode == 0 and "memory=my_store" in proc.stdout, proc.stderr


# ---------------------------------------------------------------------------------------------
# trust_remote_code and Hugging Face folders
# ---------------------------------------------------------------------------------------------

transformers_missing = pytest.mark.skipif(
    __import__("importlib").util.find_spec("transformers") is None, reason="needs transformers")


def _remote_code_folder(root: Path, marker: Path) -> Path:
    """A model folder whose own configuration code writes ``marker`` when imported."""
    folder = root / "evil_model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "rulka_marker", "hidden_size": 8,
        "auto_map": {"AutoConfig": "configuration_marker.MarkerConfig"}}))
    (folder / "configuration_marker.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from transformers import PretrainedConfig
        Path({str(marker)!r}).write_text("ran")

        class MarkerConfig(PretrainedConfig):
            model_type = "rulka_marker"
        """))
    (folder / "modeling_marker.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    return folder


def _hf_recipe(tmp_path: Path, folder: Path, slot: str) -> Path:
    if slot == "vis":
        nn = f"""
        nn:
          vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: "{folder}", trust_remote_code: true}}}}
        """
    else:
        nn = f"""
        nn:
          fusion_mode: post_concat
          encoder:
            fusion_encoder: hf_embedding
            hf_embedding: {{model_name_or_path: "{folder}", trust_remote_code: true}}
        """
    return _recipe(tmp_path, nn, f"{slot}.yaml")


@pytest.mark.parametrize("slot, key", [("vis", "nn.vis.transformer.trust_remote_code"),
                                       ("fusion", "nn.encoder.hf_embedding.trust_remote_code")])
def test_trust_remote_code_from_a_recipe_alone_is_refused(tmp_path, slot, key):
    marker = tmp_path / "pwned"
    folder = _remote_code_folder(tmp_path, marker)
    recipe = _hf_recipe(tmp_path, folder, slot)
    assert_refused(run("config", "validate", str(recipe)), f"`{key}`", "--trust-remote-code")
    assert_refused(run("rulka.trainer.cli", "--config", str(recipe), "--run-dir", str(tmp_path / "run"),
                       "--server", "127.0.0.1:9"), f"`{key}`", "--trust-remote-code")
    assert not marker.exists()
    # the user's own hand: validate says ok and a warning line names the folder whose code would run
    proc = run("config", "validate", "--trust-remote-code", str(recipe))
    assert proc.returncode == 0, proc.stderr
    assert "--trust-remote-code" in proc.stderr and str(folder) in proc.stderr
    assert not marker.exists()  # validate reads no model


@transformers_missing
def test_a_worker_never_takes_trust_remote_code_from_the_trainers_description(tmp_path):
    """The trainer's network description may say trust_remote_code (it travels to workers); a
    worker builds the model from it only when its own command line allows remote code."""
    from rulka.nn.hf import HfVisionBackbone

    marker = tmp_path / "pwned"
    folder = _remote_code_folder(tmp_path, marker)
    slot = {"hf_config": {"model_type": "rulka_marker", "hidden_size": 8}, "model_name_or_path": str(folder),
            "trust_remote_code": True}
    with pytest.raises(ConfigError, match="`nn.vis.transformer.trust_remote_code`.*--trust-remote-code"):
        HfVisionBackbone(36, 48, slot)
    assert not marker.exists()


@transformers_missing
def test_a_users_trusted_model_code_runs_with_the_flag(tmp_path, caplog):
    from rulka.nn.hf import read_hf_config

    marker = tmp_path / "ran"
    folder = _remote_code_folder(tmp_path, marker)
    with pytest.raises(ConfigError, match="--trust-remote-code"):
        read_hf_config(str(folder), trust_remote_code=True)
    assert not marker.exists()
    trust.allow_remote_code(True)
    with caplog.at_level("WARNING"):
        conf = read_hf_config(str(folder), trust_remote_code=True)
    assert conf["model_type"] == "rulka_marker" and marker.exists()
    assert any(str(folder) in r.getMessage() and "--trust-remote-code" in r.getMessage() for r in caplog.records)


class _Bomb:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@transformers_missing
def test_a_model_folder_with_only_pickle_weights_is_refused_naming_the_file(tmp_path):
    import torch
    import transformers

    marker = tmp_path / "pwned"
    folder = tmp_path / "hf_transformer_vis"  # the name nn.init_from_pretrained reads as a transformers part
    conf = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                  image_size=32, patch_size=8, num_channels=1)
    conf.save_pretrained(folder)
    torch.save({"weights": _Bomb(str(marker))}, folder / "pytorch_model.bin")
    script = textwrap.dedent(f"""
        import sys
        from rulka.nn.hf import HfVisionBackbone, read_hf_config
        from rulka.process import run_main
        def body():
            slot = {{"hf_config": read_hf_config({str(folder)!r}), "model_name_or_path": {str(folder)!r}}}
            HfVisionBackbone(36, 48, slot).load_hub_weights()
        sys.exit(run_main(body))
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limit_memory, cwd=str(REPO))
    assert_refused(proc, "pytorch_model.bin", "pickle")
    assert not marker.exists()
    # nn.init_from_pretrained on the same folder: refused the same way
    from rulka.nn.pretrained import read_folder

    with pytest.raises(ConfigError, match="pytorch_model.bin"):
        read_folder(str(folder))
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# bounded configs
# ---------------------------------------------------------------------------------------------

def _alias_bomb(levels: int = 9) -> str:
    lines = ["environment:", "  backend: gym", "  gym_id: CartPole-v1", "  gym_kwargs:",
             "    l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    recipe = _recipe(tmp_path, _alias_bomb())
    assert recipe.stat().st_size < 2000
    started = time.monotonic()
    assert_refused(run("config", "validate", str(recipe)), "100,000 values")
    assert_refused(run("config", "show", str(recipe)), "100,000 values")
    assert_refused(run("rulka.trainer.cli", "--config", str(recipe), "--run-dir", str(tmp_path / "run"),
                       "--server", "127.0.0.1:9"), "100,000 values")
    assert time.monotonic() - started < 100  # three processes, none expanding the bomb
    # the harmless counterpart: aliases that expand a little still load
    small = _recipe(tmp_path, _alias_bomb(levels=2), "small.yaml")
    proc = run("config", "show", str(small))
    assert proc.returncode == 0 and proc.stdout.count(" x") >= 1000, proc.stderr


def test_oversized_files_and_values_are_refused_naming_where(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("environment:\n  backend: gym\n  gym_id: " + "x" * (2 << 20) + "\n")
    assert_refused(run("config", "validate", str(big)), "big.yaml", "bytes")
    long_value = _recipe(tmp_path, "environment:\n  backend: gym\n  gym_id: " + "y" * 70_000 + "\n", "long.yaml")
    assert_refused(run("config", "validate", str(long_value)), "line 3", "70,000 characters")
    # a value under the bound is accepted but printed short
    medium = _recipe(tmp_path, "environment:\n  backend: gym\n  gym_id: " + "z" * 60_000 + "\n", "medium.yaml")
    proc = run("config", "validate", str(medium))
    assert max(len(line) for line in (proc.stdout + proc.stderr).splitlines()) < 400


def test_config_data_from_a_policy_or_the_network_is_bounded_too():
    """A run config arriving as JSON (a policy file's run_config_json, the trainer's weights) has
    no aliases, but may share objects or hold huge strings: the same bounds, naming the key."""
    shared: list = ["x"] * 10
    for _ in range(6):
        shared = [shared] * 10
    with pytest.raises(ConfigError, match="100,000 values"):
        config_from_dict({"environment": {"backend": "gym", "gym_id": "CartPole-v1", "gym_kwargs": {"a": shared}}})
    with pytest.raises(ConfigError, match=r"`environment.gym_id`.*70,000 characters"):
        config_from_dict({"environment": {"backend": "gym", "gym_id": "q" * 70_000}})
    assert config_from_dict({"environment": {"gym_kwargs": {"a": [[1] * 10] * 10}}}).environment.gym_kwargs["a"]


# ---------------------------------------------------------------------------------------------
# the promise kept by a check (lesson 15)
# ---------------------------------------------------------------------------------------------

# every call in rulka/ that picks code by a runtime name or could unpickle, each audited:
AUDITED_CALLS = {
    ("rulka/registry.py", "import_module"),  # built-ins, or a module the command line allowed (rulka.trust)
    ("rulka/cli/__init__.py", "import_module"),  # rulka.cli.<name> for the constant SUBCOMMANDS
    ("rulka/net/__init__.py", "import_module"),  # the constant _EXPORTS table
    ("rulka/config/reference.py", "import_module"),  # rulka.config.sections.<constant MODULES>
    ("rulka/nn/hf.py", "trust_remote_code=True"),  # only after rulka.trust.check_remote_code allowed it
}


def _risky_calls(path: Path) -> set[tuple[str, str]]:
    import ast

    rel = path.relative_to(REPO).as_posix()
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        kwargs = {k.arg: k.value for k in node.keywords}
        if name in ("import_module", "__import__") or (isinstance(func, ast.Name) and name in ("exec", "eval")):
            out.add((rel, name))
        if owner in ("pickle", "cPickle", "dill", "marshal", "shelve") or (owner == "torch" and name == "load"):
            out.add((rel, f"{owner}.{name}"))
        if owner in ("np", "numpy") and name == "load":
            allow = kwargs.get("allow_pickle")
            if not (isinstance(allow, ast.Constant) and allow.value is False):
                out.add((rel, "np.load without allow_pickle=False"))
        if owner == "yaml" and name in ("load", "load_all", "unsafe_load", "full_load"):
            loader = kwargs.get("Loader")
            if not (isinstance(loader, ast.Name) and loader.id == "_Loader"):
                out.add((rel, f"yaml.{name}"))
        remote = kwargs.get("trust_remote_code")
        if isinstance(remote, ast.Constant) and remote.value is True:
            out.add((rel, "trust_remote_code=True"))
    return out


def test_every_call_that_could_pick_code_or_unpickle_is_audited():
    found = set().union(*(_risky_calls(p) for p in sorted((REPO / "rulka").rglob("*.py"))))
    assert found - AUDITED_CALLS == set(), "new calls that pick code or unpickle: audit them (lesson 14)"
    assert AUDITED_CALLS - found == set(), "an audited call is gone: drop it from AUDITED_CALLS"


def test_rulka_run_hands_the_command_lines_allowances_to_the_roles_it_starts():
    """Every command takes the flags, and ``rulka run`` passes its own to the trainer and workers
    it launches (a worker started by hand has only its own)."""
    from rulka.cli import build_parser
    from rulka.trainer.cli import build_parser as trainer_parser
    from rulka.worker.cli import build_parser as worker_parser

    args = build_parser().parse_args(["run", "configs/sim_iqn.yaml", "--allow-plugin", "my_pkg",
                                      "--allow-plugin", "other", "--trust-remote-code"])
    handed = trust.trust_argv(args)
    assert handed == ["--allow-plugin", "my_pkg", "--allow-plugin", "other", "--trust-remote-code"]
    role = trainer_parser().parse_args(["--config", "c.yaml", *handed])
    worker = worker_parser().parse_args(["--server", "h:1", "--keys", "k", *handed])
    assert role.allow_plugin == worker.allow_plugin == ["my_pkg", "other"] and role.trust_remote_code
    trust.reset()
    trust.apply_trust_arguments(worker)
    assert trust.module_allowed("my_pkg.sub") and not trust.module_allowed("my_pkgx")
    assert trust.remote_code_allowed()
    plain = build_parser().parse_args(["eval", "runs/x"])
    assert trust.trust_argv(plain) == [] and plain.allow_plugin == []
