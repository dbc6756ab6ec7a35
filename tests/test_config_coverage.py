"""Every config key is either read by code or on the explicit "not built yet" list.

The scan is static (it parses rulka/ with ``ast``), so it cannot prove that a read value acts; it
makes a key that nothing mentions fail here instead of validating as "ok" in a user's run. A key
counts as read when rulka/ (outside the config package's validators) contains:

- its full dotted path, or a dotted suffix of two or more parts, as a string (``"training.lr_schedule"``);
- an attribute chain ending in its last two parts (``cfg.training.batch_size``, ``tr.training.batch_size``);
- when its name is unique among all config keys, an attribute or string with that name
  (``tr = cfg.training; tr.batch_size``);
- otherwise, one file that mentions both its name and its section's name (``cnn = cfg.nn.vis.cnn``
  ... ``cnn.use_impala_cnn``).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from rulka.config import RulkaConfig
from rulka.config.built import NOT_BUILT, check_built, not_built_keys
from rulka.config.loader import _models_in, config_from_dict
from rulka.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1] / "rulka"


def config_leaves() -> list[tuple[str, tuple[str, ...]]]:
    """(YAML path, attribute path) of every leaf key, walking into optional and listed sections."""
    out: list[tuple[str, tuple[str, ...]]] = []

    def walk(model: type, yaml: list[str], attrs: list[str]) -> None:
        for name, info in model.model_fields.items():
            y, a = [*yaml, info.serialization_alias or name], [*attrs, name]
            sub = _models_in(info.annotation)
            if sub:
                walk(sub[0], y, a)
            else:
                out.append((".".join(y), tuple(a)))

    walk(RulkaConfig, [], [])
    return out


def _is_validator(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef):
        return False
    if node.name == "check_consistency":
        return True
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Name) and target.id in ("model_validator", "field_validator"):
            return True
    return False


def code_mentions() -> tuple[set[tuple[str, str]], set[str], list[set[str]]]:
    """What rulka/ mentions, validators excluded: (parent, attribute) pairs, string constants, and
    per file the set of names (attributes, strings and the parts of dotted strings)."""
    pairs: set[tuple[str, str]] = set()
    strings: set[str] = set()
    per_file: list[set[str]] = []
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).parts[:1] == ("config",) and path.name == "built.py":
            continue  # the not-built list names keys without reading them
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n) for v in ast.walk(tree) if _is_validator(v) for n in ast.walk(v)}
        names: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
                if isinstance(node.value, ast.Attribute):
                    pairs.add((node.value.attr, node.attr))
                elif isinstance(node.value, ast.Name):
                    pairs.add((node.value.id, node.attr))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
                names.add(node.value)
                names.update(node.value.split("."))
        per_file.append(names)
    return pairs, strings, per_file


def _covered_by_not_built(path: str) -> bool:
    return any(path == k or path.startswith(k + ".") for k in NOT_BUILT)


def test_every_config_key_is_read_by_code_or_refused_until_built() -> None:
    leaves = config_leaves()
    pairs, strings, per_file = code_mentions()
    everywhere = set().union(*per_file)
    leaf_count = Counter(attrs[-1] for _, attrs in leaves)
    dotted_suffixes = {".".join(s.split(".")[i:]) for s in strings if "." in s for i in range(s.count("."))}
    unread = []
    for yaml_path, attrs in leaves:
        if _covered_by_not_built(yaml_path):
            continue
        leaf = attrs[-1]
        suffixes = {".".join(p[i:]) for p in (yaml_path.split("."), list(attrs)) for i in range(len(p) - 1)}
        read = (
            bool(suffixes & (strings | dotted_suffixes))
            or (len(attrs) > 1 and (attrs[-2], leaf) in pairs)
            or (leaf_count[leaf] == 1 and leaf in everywhere)
            or (len(attrs) > 1 and any(leaf in names and attrs[-2] in names for names in per_file))
        )
        if not read:
            unread.append(yaml_path)
    assert not unread, (
        "config keys that no code reads and that are not in rulka.config.built.NOT_BUILT "
        f"(read them, or list them there): {unread}"
    )


def test_not_built_list_names_real_keys_that_nothing_reads() -> None:
    """An entry of NOT_BUILT is a real key path; an entry whose key code now reads is stale."""
    paths = {y for y, _ in config_leaves()}
    sections = {y.rsplit(".", i)[0] for y in paths for i in range(1, y.count(".") + 1)}
    for key in NOT_BUILT:
        assert key in paths or key in sections, f"NOT_BUILT entry `{key}` is not a config key"
        RulkaConfig().get(key)  # reachable by cfg.get


def test_defaults_are_built() -> None:
    assert not_built_keys(RulkaConfig()) == []
    check_built(RulkaConfig())


@pytest.mark.parametrize(
    "data, key",
    [
        ({"performance": {"make_highest_prio_figures": True}}, "performance.make_highest_prio_figures"),
        ({"performance": {"gpu_collectors_count": 2}}, "performance.gpu_collectors_count"),
        ({"worker": {"actor_kwargs": {"a": 1}}}, "worker.actor_kwargs"),
        ({"grpo": {"grpo_num_minibatches": 2}}, "grpo.grpo_num_minibatches"),
    ],
)
def test_a_non_default_not_built_key_is_refused_by_name(data: dict, key: str) -> None:
    cfg = config_from_dict(data)
    with pytest.raises(ConfigError) as info:
        check_built(cfg)
    message = str(info.value)
    assert f"`{key}`" in message and "not built yet" in message and "\n" not in message


def test_an_nn_key_the_topology_does_not_read_is_refused() -> None:
    # the fusion trunk's settings mean nothing without a fusion mode
    with pytest.raises(ConfigError, match="`nn.encoder` is read only when `nn.fusion_mode` is not none"):
        check_built(config_from_dict({"nn": {"encoder": {"fusion_encoder": "mlp"}}}))
    # the MLP trunk's settings with another trunk
    with pytest.raises(ConfigError, match="`nn.encoder.fusion_mlp` is read only by fusion_encoder mlp"):
        check_built(config_from_dict({"nn": {"fusion_mode": "post_concat", "encoder": {"fusion_mlp": {}}}}))
    check_built(config_from_dict({"nn": {"fusion_mode": "post_concat",
                                         "encoder": {"fusion_encoder": "mlp", "fusion_mlp": {"hidden_dim": 64}}}}))


def test_game_keys_the_tmnf_backend_reads_are_built() -> None:
    cfg = config_from_dict({"environment": {"timeout_during_run_ms": 10100, "tmi_protection_timeout_s": 30,
                                            "timeout_between_runs_ms": 1000, "game_reboot_interval": 3600,
                                            "game_camera_number": 1, "sync_virtual_and_real_checkpoints": False},
                            "performance": {"running_speed": 80}, "worker": {"num_envs": 2},
                            "user": {"base_tmi_port": 9000},
                            "map_cycle": {"entries": [{"short_name": "d", "map_path": "default"}]}})
    assert not_built_keys(cfg) == []


def test_worker_actor_named_after_the_algorithm_is_the_default() -> None:
    assert not_built_keys(config_from_dict({"worker": {"actor": "iqn"}})) == []
    assert not_built_keys(config_from_dict({"worker": {"actor": "simple_dqn"}})) == ["worker.actor"]
