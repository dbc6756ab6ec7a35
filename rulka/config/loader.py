"""Loading a run configuration: YAML + .env + ``--set`` overrides -> a validated RulkaConfig.

Precedence, lowest first: built-in defaults < ``.env`` < the YAML file < ``--set`` overrides.
Every mistake becomes a one-line :class:`rulka.errors.ConfigError` that names the key.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import re
import tempfile
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rulka.config.bounds import (  # noqa: F401  (the bounds, re-exported where configs load)
    MAX_CONFIG_FILE_BYTES,
    MAX_CONFIG_NODES,
    MAX_SCALAR_CHARS,
    check_config_data,
    check_yaml_events,
)
from rulka.config.model import RulkaConfig
from rulka.errors import ConfigError

RESOLVED_NAME = "config.resolved.yaml"

# .env variable -> config key. Matched case-insensitively; other variables in .env are ignored.
ENV_KEYS: dict[str, str] = {
    "RULKA_SERVER_HOST": "network.server_host",
    "RULKA_PORT": "network.port",
    "RULKA_CREDENTIALS_DIR": "network.credentials_dir",
    "RULKA_WORKER_NAME": "worker.name",
    "RULKA_SPILL_DIR": "worker.spill_dir",
    "RULKA_DEVICE": "trainer.device",
    "RULKA_RUN_DIR": "logging.run_dir",
    "WANDB_ENTITY": "logging.wandb.entity",
    "WANDB_PROJECT": "logging.wandb.project",
    "WANDB_MODE": "logging.wandb.mode",
    "USERNAME": "user.username",
    "TRACKMANIA_BASE_PATH": "user.trackmania_base_path",
    "TARGET_PYTHON_LINK_PATH": "user.target_python_link_path",
    "BASE_TMI_PORT": "user.base_tmi_port",
    "LINUX_LAUNCH_GAME_PATH": "user.linux_launch_game_path",
    "WINDOWS_TMLOADER_PATH": "user.windows_tmloader_path",
    "WINDOWS_TMLOADER_PROFILE_NAME": "user.windows_tmloader_profile_name",
}

# keys whose values are plain strings even when they look like numbers (a host "10" is a name)
_STRING_KEYS = {
    "network.server_host",
    "worker.name",
    "logging.wandb.entity",
    "logging.wandb.project",
    "user.username",
    "training.run_name",
}


# ---------------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------------


# libyaml's parser when PyYAML was built with it (about 10x faster); same safe constructor
_SafeBase: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeBase):  # type: ignore[valid-type,misc]
    """SafeLoader that reads 1e-3 as a float (YAML 1.1 wants 1.0e-3), takes only true/false as
    booleans (YAML 1.2: a track called ``no`` or a mode ``on`` stays a string) and refuses
    duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}' (first at line {seen[key]})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in _SafeBase.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def parse_yaml(text: str, source: str = "<string>", with_position: bool = True) -> Any:
    """Parse YAML text safely; a syntax error becomes a ConfigError with the line number. A scalar
    over 64 KiB, or a document expanding (aliases included) to over 100,000 values, is refused
    before anything is built."""
    check_yaml_events(text, source, _Loader)
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark and with_position else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(
            f"{source}:{where}: bad YAML: {problem}" if where else f"{source}: bad YAML: {problem}"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: bad YAML: {exc}") from None


def read_yaml_file(path: str | Path) -> dict[str, Any]:
    """Read a config file into a dict. An empty file (or one of comments only) is refused: it
    is most likely a truncated copy, and would silently run every default.

    A run folder stands for the ``config.resolved.yaml`` saved in it.
    """
    path = Path(path)
    if path.is_dir() and (path / RESOLVED_NAME).is_file():
        path = path / RESOLVED_NAME
    try:
        size = path.stat().st_size if path.is_file() else 0
    except OSError:
        size = 0
    if size > MAX_CONFIG_FILE_BYTES:
        raise ConfigError(f"config file {path} is {size:,} bytes; a config is at most {MAX_CONFIG_FILE_BYTES:,}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        from rulka.bundled import bundled_config

        bundled = bundled_config(path)  # configs/sim_iqn.yaml from any folder: the copy rulka ships
        if bundled is None:
            raise ConfigError(f"config file {path} does not exist") from None
        text = bundled.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory without a {RESOLVED_NAME}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    data = parse_yaml(text, str(path))
    if data is None:
        raise ConfigError(f"config file {path} is empty: name at least what differs from the defaults "
                          "(`rulka config defaults` prints every key; configs/ holds recipes)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a mapping of sections, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------------------------------------
# overrides and .env
# ---------------------------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``key.path=value`` and parse the value as a YAML scalar or flow list/mapping."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. training.batch_size=256")
    parts = key.split(".")
    if any(not p for p in parts):
        raise ConfigError(f"--set {text!r}: empty part in key path {key!r}")
    value = raw if key in _STRING_KEYS else parse_yaml(raw, f"--set {text}", with_position=False)
    return parts, value


def _set_path(data: dict[str, Any], parts: Sequence[str], value: Any, origin: str) -> None:
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"{origin}: config key `{where}` is a value, not a section")
        node = child
    node[parts[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides to ``data`` in place (later ones win); returns ``data``."""
    for text in overrides:
        parts, value = parse_override(text)
        _set_path(data, parts, value, f"--set {text}")
    return data


def read_env_file(path: str | Path) -> dict[str, str]:
    """The known variables of a .env file (see ENV_KEYS), as config key -> raw string."""
    from dotenv import dotenv_values

    values = dotenv_values(path)
    out: dict[str, str] = {}
    upper = {k.upper(): v for k, v in values.items() if v is not None}
    for name, key in ENV_KEYS.items():
        if name in upper:
            out[key] = upper[name]
    return out


def _env_layer(env_file: str | Path | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Nested data from the .env file, and config key -> variable name for error messages."""
    if env_file is None:
        return {}, {}
    path = Path(env_file)
    if not path.is_file():
        if str(env_file) == ".env":
            return {}, {}  # the default .env is optional
        raise ConfigError(f".env file {path} does not exist")
    names = {v: k for k, v in ENV_KEYS.items()}
    data: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, raw in read_env_file(path).items():
        # kept as text: every variable is a name or a path, and pydantic reads "6000" as a port
        _set_path(data, key.split("."), raw, f"{path} {names[key]}")
        origins[key] = f"{path} {names[key]}"
    return data, origins


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``top`` into ``base`` (mappings key by key, anything else replaced); copies the
    mappings of ``top`` so later edits of ``base`` never reach the caller's data. An empty
    section in ``top`` (``network:`` with nothing under it) keeps what ``base`` has there."""
    for key, value in top.items():
        if value is None and isinstance(base.get(key), dict):
            continue
        if isinstance(value, Mapping):
            current = base.get(key)
            base[key] = _deep_merge(current if isinstance(current, dict) else {}, value)
        else:
            base[key] = value
    return base


def _merge_btr_cnn(data: dict[str, Any]) -> None:
    """btr CNN keys fill nn.vis.cnn keys that the YAML omits (guide: BTR block)."""
    btr = data.get("btr")
    if not isinstance(btr, dict):
        return
    cnn_keys = (
        "use_impala_cnn",
        "impala_model_size",
        "use_adaptive_maxpool",
        "adaptive_maxpool_size",
        "use_spectral_norm",
    )
    given = {k: btr[k] for k in cnn_keys if k in btr}
    if not given:
        return
    nn = data.setdefault("nn", {})
    if not isinstance(nn, dict):
        return
    vis = nn.setdefault("vis", {})
    if not isinstance(vis, dict) or vis.get("no_image") or vis.get("transformer") is not None:
        return
    cnn = vis.get("cnn")
    if cnn is None:
        cnn = vis["cnn"] = {}
    if isinstance(cnn, dict):
        for k, v in given.items():
            cnn.setdefault(k, v)


# ---------------------------------------------------------------------------------------------
# validation errors -> one line
# ---------------------------------------------------------------------------------------------


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_models_in(arg))
    return out


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """YAML names (field names, validation aliases, serialization aliases) -> field name."""
    names: dict[str, str] = {}
    for name, info in model.model_fields.items():
        names[info.serialization_alias or name] = name
        names[name] = name
        alias = info.validation_alias
        choices = getattr(alias, "choices", None) or ([alias] if isinstance(alias, str) else [])
        for choice in choices:
            if isinstance(choice, str):
                names[choice] = name
    return names


def _yaml_names(model: type[BaseModel]) -> list[str]:
    """The key names a user should write (field names, or their serialization alias)."""
    return [info.serialization_alias or name for name, info in model.model_fields.items()]


@functools.cache
def all_key_paths() -> tuple[str, ...]:
    """Every section and key path of the config, e.g. ``training.batch_size``."""
    paths: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            path = f"{prefix}{info.serialization_alias or name}"
            paths.append(path)
            sub = _models_in(info.annotation)
            is_list = typing.get_origin(info.annotation) is list
            if sub and not is_list:
                walk(sub[0], path + ".")

    walk(RulkaConfig, "")
    return tuple(paths)


def _walk_loc(loc: Sequence[Any], unknown_last: bool = False) -> tuple[list[Any], type[BaseModel] | None]:
    """Drop pydantic's union/type tags from an error location; also return the last model passed.

    ``unknown_last``: the last part is a key the user wrote that the model does not have.
    """
    model: type[BaseModel] | None = RulkaConfig
    parent: type[BaseModel] | None = RulkaConfig
    out: list[Any] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out.append(part)
            continue
        if model is not None:
            names = _field_names(model)
            if part in names:
                out.append(part)
                parent = model
                subs = _models_in(model.model_fields[names[part]].annotation)
                model = subs[0] if subs else None
                continue
            if unknown_last and i == len(loc) - 1:
                out.append(part)  # the unknown key itself
                parent = model
            # else: a union member or validator tag, e.g. "int" or "function-after[...]"
            continue
        # inside a plain value (list, tuple, dict): only type tags remain, which we drop
    return out, parent


def _loc_text(loc: Sequence[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# the guide's flat names (get_config().x) that are not key names themselves -> their YAML key
FLAT_NAMES: dict[str, str] = {
    "W_downsized": "nn.vis.image_size.width",
    "w_downsized": "nn.vis.image_size.width",
    "H_downsized": "nn.vis.image_size.height",
    "h_downsized": "nn.vis.image_size.height",
    "float_hidden_dim": "nn.float.mlp.hidden_dim",
    "iqn_embedding_dimension": "nn.iqn.embedding_dimension",
    "iqn_n": "nn.iqn.n",
    "iqn_k": "nn.iqn.k",
    "iqn_kappa": "nn.iqn.kappa",
    "map_cycle": "map_cycle.entries",
}

# values derived at load: setting one is a mistake with a specific fix
COMPUTED_KEYS: dict[str, str] = {
    "ms_per_action": "environment.tm_engine_step_per_action x environment.ms_per_tm_engine_step",
    "ms_per_block": "environment.rl_action_offsets_ms and the action timing",
    "n_actions_per_block": "the length of environment.rl_action_offsets_ms",
    "temporal_mini_race_duration_actions": "environment.temporal_mini_race_duration_ms // ms_per_block",
    "min_horizon_to_update_priority_actions": "temporal_mini_race_duration_actions - 40 (none at 40 or fewer)",
    "max_allowable_distance_to_virtual_checkpoint": "environment.distance_between_checkpoints and road_width",
    "final_speed_reward_per_m_per_s": "rewards.reward_per_m_advanced_along_centerline x "
    "rewards.final_speed_reward_as_if_duration_s",
}


def suggest_keys(loc: Sequence[str | int], siblings: Iterable[str]) -> list[str]:
    """Likely intended full key paths for the unknown key at ``loc``."""
    key = str(loc[-1])
    parent = _loc_text(loc[:-1])
    paths = all_key_paths()
    if key in FLAT_NAMES and FLAT_NAMES[key] != _loc_text(loc):
        return [FLAT_NAMES[key]]
    same_name = [p for p in paths if p.rsplit(".", 1)[-1] == key and p != ".".join(map(str, loc))]
    if same_name:
        return same_name[:2]
    close = difflib.get_close_matches(key, list(siblings), n=1, cutoff=0.75)
    if close:
        return [f"{parent}.{close[0]}" if parent else close[0]]
    last_parts: dict[str, str] = {}
    for p in paths:
        last_parts.setdefault(p.rsplit(".", 1)[-1], p)
    close = difflib.get_close_matches(key, list(last_parts), n=1, cutoff=0.75)
    if close:
        return [last_parts[close[0]]]
    close = difflib.get_close_matches(key, list(siblings), n=1, cutoff=0.6)
    if close:
        return [f"{parent}.{close[0]}" if parent else close[0]]
    return []


_EXPECTED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
    "path_type": "a path",
    "finite_number": "a finite number",
}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _error_text(err: Mapping[str, Any]) -> str:
    loc, parent = _walk_loc(err["loc"], unknown_last=err["type"] == "extra_forbidden")
    path = _loc_text(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        if str(loc[-1]) in COMPUTED_KEYS:
            return f"config key `{path}` is computed at load from {COMPUTED_KEYS[str(loc[-1])]}; set those instead"
        siblings = _yaml_names(parent) if parent is not None else []
        hints = suggest_keys(loc, siblings)
        text = f"config key `{path}` is unknown"
        if hints:
            text += "; did you mean " + " or ".join(f"`{h}`" for h in hints) + "?"
        else:
            where = path.rsplit(".", 1)[0] if "." in path else ""
            text += f"; known keys{' in `' + where + '`' if where else ''}: " + ", ".join(siblings[:12])
            text += ", ..." if len(siblings) > 12 else ""
        return text
    if kind == "missing":
        if loc and isinstance(loc[-1], int):  # a short tuple, e.g. a knot without its value
            return f"config key `{_loc_text(loc[:-1])}` has too few items (item [{loc[-1]}] is missing)"
        return f"config key `{path}` is required"
    if kind in _EXPECTED:
        return f"config key `{path}` must be {_EXPECTED[kind]}, got {_short(err.get('input'))}"
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"config key `{path}` must be one of {expected}, got {_short(err.get('input'))}"
    message = str(err.get("msg", kind))
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind in (
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "too_short",
        "too_long",
    ):
        return f"config key `{path}` {message[0].lower() + message[1:]}, got {_short(err.get('input'))}"
    if path:
        # validators name keys relative to their section, in backticks: make them full paths
        message = re.sub(r"`([^`]+)`", lambda m: f"`{path}.{m.group(1)}`", message)
    return f"config key `{path}` is invalid: {message}"


def _validation_message(exc: ValidationError) -> str:
    texts: list[str] = []
    seen_paths: set[str] = set()
    for err in exc.errors(include_url=False):
        loc, _ = _walk_loc(err["loc"], unknown_last=err["type"] == "extra_forbidden")
        key = _loc_text(loc)
        if key in seen_paths:
            continue  # one message per key (a union reports each alternative)
        seen_paths.add(key)
        texts.append(_error_text(err))
    if len(texts) > 3:
        return "; ".join(texts[:3]) + f" (and {len(texts) - 3} more)"
    return "; ".join(texts)


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------


def config_from_dict(data: Mapping[str, Any] | None) -> RulkaConfig:
    """Validate a config mapping (any section or key may be omitted) into a RulkaConfig."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"a config must be a mapping of sections, got {type(data).__name__}")
    check_config_data(data)
    # an empty section (`map_cycle:` with nothing under it) means "all defaults"
    plain = _deep_merge(
        {}, {k: v for k, v in data.items() if not (v is None and k in RulkaConfig.model_fields)}
    )
    _merge_btr_cnn(plain)
    try:
        return RulkaConfig.model_validate(plain)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc)) from None


ConfigLike = RulkaConfig | Mapping[str, Any] | str | Path | None


def as_config(cfg: ConfigLike) -> RulkaConfig:
    """The one conversion at an edge (a role, a plugin factory, an env built with keyword
    arguments): a ``RulkaConfig`` is returned as is; a mapping of sections (what a YAML file or
    the trainer's weights carry; any section or key may be omitted) is validated; a path is a
    YAML file or a run folder, loaded without ``.env`` and overrides; None is the built-in
    default. Past the edge, code reads typed attributes (``cfg.training.batch_size``) and every
    default is the config model's. Raises ConfigError on anything that does not validate."""
    if isinstance(cfg, RulkaConfig):
        return cfg
    if cfg is None or isinstance(cfg, Mapping):
        return config_from_dict(cfg)
    if isinstance(cfg, str | Path):
        return load_config(cfg, env_file=None)
    raise ConfigError(f"a run config must be a RulkaConfig, a mapping of sections or a path, got {type(cfg).__name__}")


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    env_file: str | Path | None = ".env",
) -> RulkaConfig:
    """Load a run configuration.

    ``path`` None means the built-in defaults; a run folder means the config saved in it by
    :func:`save_resolved`. Values are layered, lowest first: built-in
    defaults, then the ``.env`` file (the variables in ``ENV_KEYS``; a missing default ``.env`` is
    fine, ``env_file=None`` skips it), then the YAML file, then ``overrides`` (``key.path=value``,
    values parsed as YAML, later ones win). Raises ConfigError on any mistake.
    """
    env_data, env_origins = _env_layer(env_file)
    data: dict[str, Any] = _deep_merge({}, env_data)
    if path is not None:
        _deep_merge(data, read_yaml_file(path))
    apply_overrides(data, overrides)
    try:
        return config_from_dict(data)
    except ConfigError as exc:
        message = str(exc)
        origin = _origin(message, env_origins, overrides)
        if origin is None and path is not None:
            origin = str(path)
        raise ConfigError(f"{origin}: {message}" if origin else message) from None


def _origin(message: str, env_origins: Mapping[str, str], overrides: Sequence[str]) -> str | None:
    """Name the --set or .env entry an error message is about, when it is about one."""
    match = re.search(r"`([^`]+)`", message)
    if not match:
        return None
    key = re.sub(r"\[\d+\]", "", match.group(1))
    for text in reversed(overrides):
        set_key = text.partition("=")[0].strip()
        if key == set_key or key.startswith(set_key + ".") or set_key.startswith(key + "."):
            return f"--set {text}"
    if key in env_origins:
        return env_origins[key]
    return None


def with_overrides(cfg: RulkaConfig, overrides: Sequence[str]) -> RulkaConfig:
    """A new, validated config: ``cfg`` with ``key.path=value`` overrides applied."""
    data = cfg.to_dict()
    apply_overrides(data, overrides)
    return config_from_dict(data)


def resolved_yaml(cfg: RulkaConfig, header: str = "") -> str:
    """The config as YAML that reloads to an equal config, computed values in a comment block."""
    lines = []
    if header:
        lines += [f"# {line}" for line in header.splitlines()]
    lines.append("# computed at load (not settable; shown for reference):")
    dumped = yaml.safe_dump(cfg.computed(), sort_keys=False, default_flow_style=None, width=110)
    lines += [f"#   {line}" for line in dumped.splitlines()]
    return "\n".join(lines) + "\n" + cfg.to_yaml()


def save_resolved(cfg: RulkaConfig, run_dir: str | Path) -> Path:
    """Write ``run_dir/config.resolved.yaml`` atomically (creating ``run_dir``); returns its path."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / RESOLVED_NAME
    text = resolved_yaml(cfg, header=f"rulka run configuration, resolved (run {cfg.training.run_name})")
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".config.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE``, repeatable ``--set KEY.PATH=VALUE`` and ``--env-file FILE`` to a parser."""
    group = parser.add_argument_group("configuration")
    group.add_argument(
        "--config", metavar="FILE", default=None, help="run configuration YAML (default: built-in defaults)"
    )
    group.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY.PATH=VALUE",
        action="append",
        default=[],
        help="override one config value, e.g. --set training.batch_size=256 (repeatable; value parsed as YAML)",
    )
    group.add_argument(
        "--env-file",
        metavar="FILE",
        default=".env",
        help="user-specific values (paths, wandb entity); YAML and --set override them (default: ./.env if present)",
    )


def config_from_args(args: argparse.Namespace) -> RulkaConfig:
    """Load the config named by arguments added with :func:`add_config_arguments`."""
    return load_config(
        getattr(args, "config", None), getattr(args, "overrides", ()) or (), getattr(args, "env_file", ".env")
    )
