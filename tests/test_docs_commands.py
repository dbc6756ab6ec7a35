"""Every command the README and docs/ show is one the code accepts: each ``rulka``, ``rulka-server``,
``rulka-trainer`` and ``rulka-worker`` command (in a shell block or inline) names a real
sub-command whose ``--help`` runs, and every ``--flag`` it shows is one that command takes; every
``configs/*.yaml`` path shown exists and validates with ``rulka config validate``; every
``python path.py`` script shown exists; every ``--set KEY=VALUE`` shown sets a key of the config
schema, and every config key written in backticks (``training.batch_size``) is one. A renamed
flag, key or a deleted config then fails here, not in a newcomer's terminal."""

from __future__ import annotations

import argparse
import collections.abc
import contextlib
import functools
import glob
import io
import re
import shlex
import typing
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROGRAMS = ("rulka", "rulka-server", "rulka-trainer", "rulka-worker")
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "powershell", "bat", "cmd"}
CONFIG_PATH = re.compile(r"(?<![\w/.-])configs/[\w.*-]+\.yaml")
DIAGRAM = re.compile("[─│►◄]")  # a box drawing in a plain fence, not a command line
PYTHON_SCRIPT = re.compile(r"\bpython3? ((?:[\w.-]+/)*[\w.-]+\.py)\b")


def shell_lines(text: str) -> list[str]:
    """The command lines of a page: lines of shell fences (continuations joined, comments cut) and
    inline code spans."""
    lines: list[str] = []
    fence: str | None = None
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip().lower()
            continue
        if fence is not None:
            if fence in SHELL_FENCES and not DIAGRAM.search(stripped):
                line = pending + stripped
                if line.endswith("\\"):
                    pending = line[:-1] + " "
                    continue
                pending = ""
                lines.append(line)
            continue
        lines.extend(re.findall(r"`([^`\n]+)`", raw))
    return lines


def commands(text: str) -> list[list[str]]:
    """Each rulka command of a page as its words, from ``rulka``/``rulka-*`` (or ``.venv/bin/...``)
    to the end of its part of a ``&&`` chain or the ``#`` comment."""
    found = []
    for line in shell_lines(text):
        line = re.sub(r"\s#.*$", "", line)
        for part in line.split("&&"):
            try:
                words = shlex.split(part.replace("<", "").replace(">", ""))
            except ValueError:
                continue
            for i, word in enumerate(words):
                if word.rpartition("/")[2] in PROGRAMS and (i == 0 or words[i - 1] in ("sudo",)):
                    found.append([word.rpartition("/")[2], *words[i + 1:]])
                    break
    return found


def shown() -> list[tuple[str, list[str]]]:
    return [(page.relative_to(REPO).as_posix(), cmd) for page in PAGES
            for cmd in commands(page.read_text(encoding="utf-8"))]


def parser_for(program: str) -> argparse.ArgumentParser:
    if program == "rulka":
        from rulka.cli import build_parser
    elif program == "rulka-server":
        from rulka.server.cli import build_parser
    elif program == "rulka-trainer":
        from rulka.trainer.cli import build_parser
    else:
        from rulka.worker.cli import build_parser
    return build_parser()


def walk(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The sub-command parser the words name (``rulka keys add-worker`` -> the add-worker parser)
    and the sub-command path taken."""
    path: list[str] = []
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
        path.append(word)
    return parser, path


def help_runs(program: str, path: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        parser_for(program).parse_args([*path, "--help"])
    assert stop.value.code == 0
    return out.getvalue()


def test_the_pages_show_commands() -> None:
    found = shown()
    programs = {cmd[0] for _, cmd in found}
    assert programs == set(PROGRAMS), programs
    readme = [cmd for page, cmd in found if page == "README.md"]
    assert ["rulka", "run", "configs/sim_iqn.yaml", "--workers", "2", "--minutes", "20"] in readme
    assert len(found) > 40


def test_extraction_keeps_flags_and_drops_prose() -> None:
    page = ("Run `rulka-worker --cpu-cores 2-5` or `rulka/SimTrack-v0`.\n```bash\n"
            "rulka-trainer --config c.yaml \\\n    --set a=b   # note\npython x.py && rulka status\n```\n"
            "```yaml\nrulka: not a command\n```\n")
    assert commands(page) == [["rulka-worker", "--cpu-cores", "2-5"],
                              ["rulka-trainer", "--config", "c.yaml", "--set", "a=b"], ["rulka", "status"]]


@pytest.mark.parametrize("page,cmd", shown(), ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_command_is_valid(page: str, cmd: list[str]) -> None:
    program, words = cmd[0], cmd[1:]
    parser, path = walk(parser_for(program), words)
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    rest = words[len(path):]
    if subs and rest and not rest[0].startswith("-"):
        pytest.fail(f"{page}: {' '.join(cmd)}: {rest[0]!r} is not a sub-command of {program} {' '.join(path)}")
    help_text = help_runs(program, path)
    assert help_text.startswith("usage:")
    unknown = [w.split("=", 1)[0] for w in rest
               if w.startswith("--") and w.split("=", 1)[0] not in parser._option_string_actions]
    assert unknown == [], f"{page}: {' '.join(cmd)}: no such option {unknown}"


def test_unknown_flags_and_subcommands_are_caught() -> None:
    parser, path = walk(parser_for("rulka"), ["keys", "add-worker", "pc1", "--dir", "keys"])
    assert path == ["keys", "add-worker"] and "--dir" in parser._option_string_actions
    assert "--no-such-flag" not in parser._option_string_actions
    parser, path = walk(parser_for("rulka"), ["kees", "list"])
    assert path == []


def shown_configs() -> list[str]:
    paths: set[str] = set()
    for page in PAGES:
        paths.update(CONFIG_PATH.findall(page.read_text(encoding="utf-8")))
    return sorted(paths)


def test_every_config_shown_validates() -> None:
    from rulka.cli import main

    shown_paths = shown_configs()
    assert "configs/sim_iqn.yaml" in shown_paths
    files: list[str] = []
    for shown_path in shown_paths:
        matches = sorted(glob.glob(str(REPO / shown_path)))
        assert matches, f"{shown_path} is shown in the docs but does not exist"
        files.extend(matches)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["config", "validate", *sorted(set(files))])
    assert code == 0, out.getvalue()
    assert out.getvalue().count("ok: ") == len(set(files))


def test_every_python_script_shown_exists() -> None:
    scripts = {m for page in PAGES for m in PYTHON_SCRIPT.findall(page.read_text(encoding="utf-8"))}
    assert "docs/make_pictures.py" in scripts
    missing = [s for s in sorted(scripts) if not (REPO / s).is_file()]
    assert missing == []


# -- config keys ------------------------------------------------------------------------------------
# keys a page shows as a mistake on purpose (the error message for an unknown key)
SHOWN_AS_WRONG = {("docs/configuration.md", "memory.batch_size")}
FILE_NAME = re.compile(r"\.(py|ya?ml|md|jsonl?|log|key|pem|txt|csv|safetensors|png|gif|mp4)$")
ENTRY_POINT = re.compile(r"^[\w.]+\s*=\s*[\w.]+:\w+$")  # a plugin's entry point: ``memory.my_store = pkg.mod:Class``


def _union(annotation: typing.Any) -> list[typing.Any]:
    args = typing.get_args(annotation)
    return [a for arg in args for a in _union(arg)] if typing.get_origin(annotation) in (typing.Union, type(int | None)) \
        else [annotation]


def _free_form(annotation: typing.Any) -> bool:
    """A mapping (or Any) whose entries the schema does not name (``worker.compressor_kwargs``)."""
    return any(a is typing.Any or a is dict or typing.get_origin(a) in (dict, collections.abc.Mapping)
               for a in _union(annotation))


def _models(annotation: typing.Any) -> list[type]:
    """The config models a field holds: itself, or the elements of a list of them."""
    from pydantic import BaseModel

    out = []
    for a in _union(annotation):
        for t in [a, *(typing.get_args(a) if typing.get_origin(a) is list else ())]:
            if isinstance(t, type) and issubclass(t, BaseModel):
                out.append(t)
    return out


@functools.cache
def key_kind(path: str) -> str | None:
    """"key" for a settable key of the config schema (or an entry under a free-form mapping),
    "computed" for a read-only computed value (``environment.ms_per_action``), None for neither.
    ``[i]`` or ``[]`` after a part addresses a list's elements (``map_cycle.entries[].map_path``)."""
    from rulka.config import RulkaConfig

    model: type = RulkaConfig
    parts = re.sub(r"\[\d*\]", "", path).split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        fields = {}
        for name, info in model.model_fields.items():
            alias = info.validation_alias
            names = [name, info.serialization_alias, *(getattr(alias, "choices", None) or [alias])]
            fields.update({n: info for n in names if isinstance(n, str)})
        info = fields.get(part)
        if info is None:
            computed = isinstance(getattr(model, part, None), (property, functools.cached_property))
            return "computed" if computed and last else None
        if last:
            return "key"
        models = _models(info.annotation)
        if models:
            model = models[0]
        else:
            return "key" if _free_form(info.annotation) else None
    return None


SET_KEY = re.compile(r"--set(?:=|\s+)([A-Za-z_][\w.\[\]]*)=")
PLACEHOLDER_KEYS = {"key.path", "KEY.PATH"}  # the syntax itself, as the pages explain it


def shown_overrides() -> list[tuple[str, str]]:
    """(page, key) of every ``--set KEY=VALUE`` on a page: in commands, prose and inline code,
    also where a line break splits it."""
    return [(page.relative_to(REPO).as_posix(), key) for page in PAGES
            for key in SET_KEY.findall(page.read_text(encoding="utf-8")) if key not in PLACEHOLDER_KEYS]


def shown_keys() -> list[tuple[str, str]]:
    """(page, key) of every inline code span that starts with a config section's name and a dot
    (``training.batch_size``, ``worker.pause_for_credit: false``), file names and plugin entry
    points left out."""
    from rulka.config import RulkaConfig

    sections = set(RulkaConfig.model_fields)
    found = []
    for page in PAGES:
        for span in re.findall(r"`([^`\n]+)`", page.read_text(encoding="utf-8")):
            m = re.match(r"([a-z_]+(?:\.\w+(?:\[\d*\])?)+)", span)
            if m and m.group(1).split(".")[0] in sections and not FILE_NAME.search(m.group(1)) \
                    and not ENTRY_POINT.match(span):
                found.append((page.relative_to(REPO).as_posix(), m.group(1)))
    return found


def test_every_set_key_shown_is_a_config_key() -> None:
    overrides = shown_overrides()
    assert len(overrides) > 5, overrides
    assert SET_KEY.findall("`--set a.b=1 --set\nc.d=2`, --set=e.f=3") == ["a.b", "c.d", "e.f"]  # also split over lines
    wrong = [f"{page}: --set {key}" for page, key in overrides if key_kind(key) != "key"]
    assert wrong == [], "no such config key (or a computed one, which cannot be set): " + "; ".join(wrong)


def test_every_config_key_in_backticks_is_in_the_schema() -> None:
    keys = shown_keys()
    assert len(keys) > 50, keys
    wrong = sorted({f"{page}: {key}" for page, key in keys if key_kind(key) is None and (page, key) not in SHOWN_AS_WRONG})
    assert wrong == [], "no such config key: " + "; ".join(wrong)


def test_the_key_check_knows_keys_lists_mappings_and_computed_values() -> None:
    assert key_kind("training.batch_size") == "key" and key_kind("trainer.rate_limit.credit_segments") == "key"
    assert key_kind("map_cycle.entries[].map_path") == "key" and key_kind("map_cycle.entries[0].is_exploration") == "key"
    assert key_kind("worker.compressor_kwargs.level") == "key"  # a free-form mapping's entry
    assert key_kind("environment.ms_per_action") == "computed"
    for wrong in ("memory.batch_size", "training", "training.batch_size.x", "map_cycle.entries[].no_such", "nope.x"):
        assert key_kind(wrong) in (None, "key" if wrong == "training" else None), wrong
    assert ("docs/configuration.md", "memory.batch_size") in shown_keys()
    assert ENTRY_POINT.match("memory.my_store = my_pkg.store:Store") and not ENTRY_POINT.match("worker.on_full: block")
