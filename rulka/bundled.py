"""Files rulka ships: the run configs of the repository's ``configs/`` folder.

A wheel carries them as ``rulka/configs/*.yaml`` (``setup.py`` copies them in at build time); a
source checkout or editable install reads the repository's ``configs/``. A config path that does
not exist but names a bundled config (``configs/sim_iqn.yaml`` or ``sim_iqn.yaml``) reads the
bundled copy, so the README's commands work from any folder once rulka is installed.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_SUFFIXES = (".yaml", ".yml")


def configs_dir() -> Path | None:
    """The folder of bundled run configs: inside the package (a wheel), else the repository's."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if candidate.is_dir():
            return candidate
    return None


def bundled_configs() -> list[str]:
    """File names of the bundled run configs, sorted."""
    folder = configs_dir()
    if folder is None:
        return []
    return sorted(p.name for p in folder.iterdir() if p.suffix in CONFIG_SUFFIXES)


def bundled_config(path: str | Path) -> Path | None:
    """The bundled config ``path`` stands for when no such file exists: ``NAME.yaml`` or
    ``configs/NAME.yaml`` with NAME a bundled config. None when ``path`` exists or names none."""
    p = Path(path)
    if p.exists() or p.suffix not in CONFIG_SUFFIXES:
        return None
    if len(p.parts) > 2 or (len(p.parts) == 2 and p.parts[0] != "configs"):
        return None
    folder = configs_dir()
    if folder is None or not (folder / p.name).is_file():
        return None
    return folder / p.name
