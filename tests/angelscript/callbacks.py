"""Check a plugin's host callbacks against the host's documented list.

A host calls a plugin function by name and signature; one with a misspelt name, or the right name
with another signature, compiles and is silently never called. ``as_check`` prints every global
function the compiler built (``function: <declaration>``, namespaces in the types, no parameter
names); ``check`` compares them with ``vendor/<host>_callbacks.txt`` (each file names its source):

* a function with a callback's name must have that callback's declaration (return and parameter
  types);
* a function whose name is one edit from a callback's name (insert, delete, replace, swap two
  neighbours; or two edits for names of 9 letters or more, e.g. ``OnDestroy`` for ``OnDestroyed``;
  or the same name in another case) is refused: it is almost surely that callback misspelt.

Errors use the compiler's format (``SCRIPT:LINE:COL: ERR: message``) at the function's definition.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {"tminterface": "tminterface2_callbacks.txt", "openplanet": "openplanet_callbacks.txt"}


def load(host: str) -> dict[str, str]:
    """Callback name -> normalised declaration."""
    out = {}
    for line in (HERE / "vendor" / FILES[host]).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out[_name(line)] = normalise(line)
    return out


def _name(decl: str) -> str:
    return re.search(r"([A-Za-z_]\w*)\s*\(", decl).group(1)


def normalise(decl: str) -> str:
    """``ret name(types)`` with single spaces, ``&`` written ``&inout`` (AngelScript's default),
    ``T[]`` written ``array<T>``."""
    d = re.sub(r"\s+", " ", decl.strip())
    d = re.sub(r"\s*([(),@&<>])\s*", r"\1", d)
    d = re.sub(r"&(?!in\b|out\b|inout\b)", "&inout", d)
    while True:
        d2 = re.sub(r"((?:const )?[\w:]+)\[\]", r"array<\1>", d)
        if d2 == d:
            return d.replace(",", ", ")
        d = d2


def distance(a: str, b: str) -> int:
    """Edit distance with adjacent swaps (optimal string alignment)."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def near_miss(name: str, callback: str) -> bool:
    """True when ``name`` is almost surely ``callback`` misspelt."""
    if name == callback:
        return False
    if name.lower() == callback.lower():
        return True
    limit = 2 if min(len(name), len(callback)) >= 9 else 1
    return distance(name, callback) <= limit


def _where(source: str, name: str) -> tuple[int, int]:
    """(line, column) of the definition of global function ``name`` in ``source`` (1-based)."""
    for i, line in enumerate(source.splitlines(), 1):
        m = re.match(rf"^([\w:@&<>\[\] ]+?\s+)({re.escape(name)})\s*\(", line)
        if m:
            return i, m.start(2) + 1
    return 0, 0


def check(host: str, output: str, script: Path) -> list[str]:
    """Error lines for the callbacks among the functions ``as_check`` printed for ``script``."""
    callbacks = load(host)
    source = script.read_text(encoding="utf-8")
    errors = []
    for decl in re.findall(r"^function: (.*)$", output, re.M):
        name = _name(decl)
        line, col = _where(source, name)
        at = f"{script}:{line}:{col}: ERR: "
        if name in callbacks:
            if normalise(decl) != callbacks[name]:
                errors.append(at + f"callback '{name}' declared '{normalise(decl)}'; the host calls "
                              f"'{callbacks[name]}' ({FILES[host]})")
            continue
        near = [cb for cb in callbacks if near_miss(name, cb)]
        if near:
            errors.append(at + f"function '{name}' is one edit from the callback '{near[0]}' "
                          f"('{callbacks[near[0]]}'); the host would never call it")
    return errors
